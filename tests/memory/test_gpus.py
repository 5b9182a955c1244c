"""GPU catalog lookups and size parsing (trainmedic.memory.gpus)."""

from __future__ import annotations

import pytest

from trainmedic.errors import ConfigError
from trainmedic.memory.gpus import (
    GPUS,
    GpuTarget,
    format_bytes,
    gpu_target,
    known_gpu_names,
    lookup_gpu,
    parse_size,
)

REQUIRED = {"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "a10g", "l4", "l40s",
            "t4", "v100-16gb", "v100-32gb", "rtx-3090", "rtx-4090", "mi250x", "mi300x", "b200"}


def test_catalog_has_the_common_accelerators() -> None:
    assert REQUIRED <= set(known_gpu_names())


@pytest.mark.parametrize(("alias", "name"), [
    ("h100", "h100-sxm"),
    ("H100 SXM", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # torch.cuda.get_device_name()
    ("nvidia_h100_pcie", "h100-pcie"),
    ("a100-40gb", "a100-40gb"),
    ("a100-80gb", "a100-80gb"),
    ("A100 80GB", "a100-80gb"),
    ("A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("Tesla T4", "t4"),
    ("Tesla V100-SXM2-16GB", "v100-16gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("4090", "rtx-4090"),
    ("AMD Instinct MI300X", "mi300x"),
    ("  B200 ", "b200"),
])
def test_aliases_resolve(alias: str, name: str) -> None:
    assert lookup_gpu(alias).name == name


# "a100" moved out of this list: it is no longer unknown but ambiguous (see below).
@pytest.mark.parametrize("bad", ["h900", "", "gpu", "a10"])
def test_unknown_gpu_lists_known_names(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        lookup_gpu(bad)
    message = str(err.value)
    assert message.startswith("gpu:")
    assert "a100-40gb" in message and "h100-sxm" in message


@pytest.mark.parametrize(("name", "question", "variants"), [
    ("a100", "(40 or 80 GB?)", "a100-40gb, a100-80gb"),
    ("NVIDIA A100", "(40 or 80 GB?)", "a100-40gb, a100-80gb"),
    ("v100", "(16 or 32 GB?)", "v100-16gb, v100-32gb"),
    ("rtx", "(which one?)", "rtx-3090, rtx-4090"),  # same size: the size is not the question
])
def test_ambiguous_gpu_asks_which_variant(name: str, question: str, variants: str) -> None:
    with pytest.raises(ConfigError) as err:
        lookup_gpu(name, field="--gpu")
    assert str(err.value) == (f"--gpu: {name!r} is ambiguous {question}; expected one of "
                              f"{variants}")


def test_gpu_target_by_name_or_size() -> None:
    assert gpu_target(None, None) is None
    by_name = gpu_target("a100-80gb", None)
    assert by_name is not None and by_name.memory_bytes == lookup_gpu("a100-80gb").total_bytes
    assert by_name.note is None and "A100-SXM4-80GB" in by_name.label
    assert gpu_target(None, "80GiB") == GpuTarget(memory_bytes=80 * 2**30, label="80GiB")
    with pytest.raises(ConfigError, match="^give --gpu NAME or --gpu-memory SIZE, not both$"):
        gpu_target("h100", "80GB", gpu_field="--gpu", memory_field="--gpu-memory")
    with pytest.raises(ConfigError, match="^--gpu-memory: got 'lots'"):
        gpu_target(None, "lots", memory_field="--gpu-memory")


@pytest.mark.parametrize(("text", "expected"), [("80", 80 * 10**9), (" 24 ", 24 * 10**9),
                                                ("40.5", 40_500_000_000)])
def test_gpu_memory_without_a_unit_is_gb_with_a_note(text: str, expected: int) -> None:
    # Nobody means an 80-byte GPU: a bare number is the marketed size in GB, and says so.
    target = gpu_target(None, text, memory_field="--gpu-memory")
    assert target is not None and target.memory_bytes == expected
    number = text.strip()
    assert target.label == f"{number}GB"
    assert target.note == (f"--gpu-memory {number} has no unit: read as {number}GB "
                           f"({number} x 10^9 bytes); write {number}GiB for {number} x 2^30")


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_totals_are_plausible_for_the_marketed_size(gpu) -> None:
    # What a device offers is a little under its marketed size read as GiB (ECC, driver
    # reserve): a MB/MiB or GB/GiB slip in the table would fall outside this band.
    nominal = gpu.nominal_gb * 2**30
    assert 0.85 * nominal <= gpu.total_bytes <= 1.0 * nominal
    if gpu.bf16_dense_tflops is not None and gpu.fp16_dense_tflops is not None:
        assert gpu.bf16_dense_tflops == gpu.fp16_dense_tflops  # same tensor-core rate
    if gpu.memory_bandwidth_bytes_per_s is not None:
        assert 2 * 10**11 <= gpu.memory_bandwidth_bytes_per_s <= 10**13


@pytest.mark.parametrize(("text", "expected"), [
    ("80GB", 80 * 10**9),
    ("80GiB", 80 * 2**30),
    ("80 gib", 80 * 2**30),
    ("40G", 40 * 2**30),
    ("40g", 40 * 2**30),
    ("1.5TB", 1_500_000_000_000),
    ("512MiB", 512 * 2**20),
    ("512M", 512 * 2**20),
    ("2KB", 2000),
    ("0.5KiB", 512),
    ("1024", 1024),
    ("1024B", 1024),
    (" 7 ", 7),
    (4096, 4096),
])
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GB", "abc", "-1GB", "0", "0GB", "10XB", "1e9", "80 G B",
                                 "1,5GB", -5, 0, True])
def test_parse_size_rejects_bad_input(bad: str | int) -> None:
    with pytest.raises(ConfigError) as err:
        parse_size(bad, field="gpu_memory")
    assert str(err.value).startswith("gpu_memory:")


@pytest.mark.parametrize(("nbytes", "text"), [
    # As c10's format_size prints them (seen in real OOM messages).
    (0, "0 bytes"),
    (1024, "1024 bytes"),
    (2**20, "1024.00 KiB"),
    (576 * 2**10, "576.00 KiB"),
    (20 * 2**20, "20.00 MiB"),
    (2**30, "1024.00 MiB"),
    (3 * 2**29, "1.50 GiB"),
    (130206 * 2**30, "130206.00 GiB"),
])
def test_format_bytes_matches_torch(nbytes: int, text: str) -> None:
    assert format_bytes(nbytes) == text
