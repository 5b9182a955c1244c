"""A catalog of common accelerators and the parsing of memory sizes (``80GB``, ``40GiB``).

``total_bytes`` is what the device offers a PyTorch process: the ``total_memory`` that
``torch.cuda.get_device_properties`` reports (``cudaDeviceProp.totalGlobalMem``), which is a
little below the marketed capacity (ECC and the driver's reserve). Where such a reading was
found in public logs it is used — the smallest one seen, since it varies by a few MiB with the
driver — and ``total_bytes_source`` says ``"reported"``; otherwise the nominal capacity is used
and ``total_bytes_source`` says ``"nominal"`` (the usable figure is then a few percent lower).

Peak throughput is the vendor datasheet's *dense* figure (no 2:4 sparsity) for bf16 and fp16
tensor-core math, in TFLOP/s; memory bandwidth is the datasheet's peak, in bytes/s. A ``None``
means the vendor documents no such figure (e.g. no bf16 on Volta/Turing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

from trainmedic.errors import ConfigError

__all__ = ["GpuSpec", "GpuTarget", "GPUS", "lookup_gpu", "known_gpu_names", "parse_size",
           "format_bytes", "gpu_target"]

_MIB = 2**20
_GB = 10**9
_TB_S = 10**12

TotalSource = Literal["reported", "nominal"]


@dataclass(kw_only=True, frozen=True)
class GpuSpec:
    """One accelerator model as a training or serving plan sees it."""

    name: str
    """Canonical catalog name (``h100-sxm``); also the first alias."""
    display_name: str
    """The name as the vendor (and ``torch.cuda.get_device_name``) writes it."""
    aliases: tuple[str, ...]
    """Other names :func:`lookup_gpu` accepts, already normalized (lowercase, ``-``)."""
    total_bytes: int
    """Memory one PyTorch device offers (see the module docstring for its source)."""
    total_bytes_source: TotalSource
    """``reported``: a ``torch.cuda`` total_memory reading; ``nominal``: marketed capacity."""
    nominal_gb: int
    """Capacity as marketed ("80GB"): a label, not a byte count (vendors' GB is closer to GiB
    of physical memory, of which the device then offers a little less)."""
    bf16_dense_tflops: float | None
    """Datasheet dense bf16 tensor-core peak, TFLOP/s (None: not supported/documented)."""
    fp16_dense_tflops: float | None
    """Datasheet dense fp16 tensor-core peak (fp32 accumulate), TFLOP/s."""
    memory_bandwidth_bytes_per_s: int | None
    """Datasheet peak memory bandwidth, bytes/s."""
    vendor: Literal["nvidia", "amd"]
    """Who makes it (decides CUDA vs ROCm/HIP wording)."""
    note: str = ""
    """Sources and caveats of the figures above."""

    def dense_tflops(self, dtype: str) -> float | None:
        """The datasheet's dense tensor-core peak for a torch dtype name (``bfloat16``,
        ``float16``), TFLOP/s; ``None`` for another dtype or an undocumented one."""
        return {"bfloat16": self.bf16_dense_tflops, "float16": self.fp16_dense_tflops}.get(dtype)


def _mib(n: int) -> int:
    return n * _MIB


# Sources of the throughput/bandwidth figures (vendor datasheets, dense = without sparsity):
# - NVIDIA H100 Tensor Core GPU datasheet: SXM bf16/fp16 989 TFLOPS dense (1,979 sparse),
#   3.35 TB/s; PCIe 756 dense (1,513 sparse), 2.0 TB/s.
# - NVIDIA H200 Tensor Core GPU datasheet: 989 dense (1,979 sparse), 141 GB HBM3e, 4.8 TB/s.
# - NVIDIA A100 Tensor Core GPU datasheet: bf16/fp16 312 dense (624 sparse); 40GB 1,555 GB/s,
#   80GB SXM 2,039 GB/s.
# - NVIDIA L4 datasheet: bf16/fp16 121 dense (242 sparse), 24 GB, 300 GB/s.
# - NVIDIA L40S datasheet: bf16/fp16 362.05 dense (733 sparse), 48 GB, 864 GB/s.
# - NVIDIA T4 datasheet: fp16 mixed precision 65 TFLOPS, 16 GB, 320 GB/s (no bf16 on Turing).
# - NVIDIA V100 datasheet: SXM2 tensor 125 TFLOPS, 900 GB/s (no bf16 on Volta).
# - NVIDIA Ampere GA102 whitepaper (RTX 3090): fp16/bf16 tensor with fp32 accumulate 71 dense
#   (142 sparse), 936 GB/s.
# - NVIDIA Ada Lovelace (AD102) whitepaper (RTX 4090): fp16/bf16 tensor with fp32 accumulate
#   165.2 dense (330.4 sparse), 1,008 GB/s.
# - NVIDIA HGX B200 specification (per GPU, 1,000 W): bf16/fp16 2.25 PFLOPS dense (4.5 sparse),
#   180 GB HBM3e, 8 TB/s.
# - AMD Instinct MI250X datasheet (per OAM module = 2 GCDs): fp16/bf16 383 TFLOPS, 128 GB HBM2e,
#   3.2 TB/s; PyTorch sees each GCD as one device, so the per-device figures are halves.
# - AMD Instinct MI300X datasheet: fp16/bf16 1,307.4 TFLOPS dense, 192 GB HBM3, 5.3 TB/s.
# The "reported" totals are torch's _CudaDeviceProperties(total_memory=...MB) printed in public
# logs and issue reports (MB there is MiB); A100 80GB is from an OOM message's "total capacity"
# (79.15 GiB, printed to 2 decimals, so within 5 MiB).
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        name="h100-sxm", display_name="NVIDIA H100 80GB HBM3",
        aliases=("h100", "h100-80gb", "h100-sxm5", "h100-80gb-hbm3"),
        total_bytes=_mib(81082), total_bytes_source="reported", nominal_gb=80,
        bf16_dense_tflops=989.4, fp16_dense_tflops=989.4,
        memory_bandwidth_bytes_per_s=3_350 * _GB, vendor="nvidia",
        note="total_memory seen as 81082-81090 MiB depending on the driver",
    ),
    GpuSpec(
        name="h100-pcie", display_name="NVIDIA H100 PCIe",
        aliases=("h100-pcie-80gb",),
        total_bytes=_mib(81008), total_bytes_source="reported", nominal_gb=80,
        bf16_dense_tflops=756.0, fp16_dense_tflops=756.0,
        memory_bandwidth_bytes_per_s=2_000 * _GB, vendor="nvidia",
    ),
    GpuSpec(
        name="h200", display_name="NVIDIA H200",
        aliases=("h200-sxm", "h200-141gb"),
        total_bytes=_mib(143156), total_bytes_source="reported", nominal_gb=141,
        bf16_dense_tflops=989.4, fp16_dense_tflops=989.4,
        memory_bandwidth_bytes_per_s=4_800 * _GB, vendor="nvidia",
    ),
    GpuSpec(
        name="a100-40gb", display_name="NVIDIA A100-SXM4-40GB",
        aliases=("a100-sxm4-40gb", "a100-40g", "a100-pcie-40gb"),
        total_bytes=_mib(40326), total_bytes_source="reported", nominal_gb=40,
        bf16_dense_tflops=312.0, fp16_dense_tflops=312.0,
        memory_bandwidth_bytes_per_s=1_555 * _GB, vendor="nvidia",
        note="total_memory: 40536 MiB (SXM4) and 40326 MiB (PCIe) seen; the smaller is kept",
    ),
    GpuSpec(
        name="a100-80gb", display_name="NVIDIA A100-SXM4-80GB",
        aliases=("a100-sxm4-80gb", "a100-80g", "a100-80gb-pcie"),
        total_bytes=int(Decimal("79.15") * 2**30), total_bytes_source="reported",
        nominal_gb=80, bf16_dense_tflops=312.0, fp16_dense_tflops=312.0,
        memory_bandwidth_bytes_per_s=2_039 * _GB, vendor="nvidia",
        note="total from an OOM message (79.15 GiB, +-5 MiB); PCIe variant: 1,935 GB/s",
    ),
    GpuSpec(
        name="a10g", display_name="NVIDIA A10G",
        aliases=("a10g-24gb",),
        total_bytes=_mib(22587), total_bytes_source="reported", nominal_gb=24,
        bf16_dense_tflops=None, fp16_dense_tflops=None, memory_bandwidth_bytes_per_s=None,
        vendor="nvidia",
        note="AWS-only variant of the A10; NVIDIA publishes no A10G datasheet, so no peaks",
    ),
    GpuSpec(
        name="l4", display_name="NVIDIA L4",
        aliases=("l4-24gb",),
        total_bytes=24 * 2**30, total_bytes_source="nominal", nominal_gb=24,
        bf16_dense_tflops=121.0, fp16_dense_tflops=121.0,
        memory_bandwidth_bytes_per_s=300 * _GB, vendor="nvidia",
        note="no torch total_memory reading found: nominal 24 GiB GDDR6; with ECC on, expect "
        "about 22 GiB usable",
    ),
    GpuSpec(
        name="l40s", display_name="NVIDIA L40S",
        aliases=("l40s-48gb",),
        total_bytes=_mib(45589), total_bytes_source="reported", nominal_gb=48,
        bf16_dense_tflops=362.05, fp16_dense_tflops=362.05,
        memory_bandwidth_bytes_per_s=864 * _GB, vendor="nvidia",
    ),
    GpuSpec(
        name="t4", display_name="Tesla T4",
        aliases=("t4-16gb",),
        total_bytes=_mib(14930), total_bytes_source="reported", nominal_gb=16,
        bf16_dense_tflops=None, fp16_dense_tflops=65.0,
        memory_bandwidth_bytes_per_s=320 * _GB, vendor="nvidia",
        note="total_memory seen from 14930 to 15109 MiB depending on the driver",
    ),
    GpuSpec(
        name="v100-16gb", display_name="Tesla V100-SXM2-16GB",
        aliases=("v100-sxm2-16gb", "v100-16g"),
        total_bytes=_mib(16130), total_bytes_source="reported", nominal_gb=16,
        bf16_dense_tflops=None, fp16_dense_tflops=125.0,
        memory_bandwidth_bytes_per_s=900 * _GB, vendor="nvidia",
        note="total_memory seen as 16130-16160 MiB",
    ),
    GpuSpec(
        name="v100-32gb", display_name="Tesla V100-SXM2-32GB",
        aliases=("v100-sxm2-32gb", "v100-pcie-32gb", "v100-32g"),
        total_bytes=_mib(32510), total_bytes_source="reported", nominal_gb=32,
        bf16_dense_tflops=None, fp16_dense_tflops=125.0,
        memory_bandwidth_bytes_per_s=900 * _GB, vendor="nvidia",
        note="total_memory reading is of the PCIe card (SXM2 assumed equal); PCIe peak is "
        "112 TFLOPS",
    ),
    GpuSpec(
        name="rtx-3090", display_name="NVIDIA GeForce RTX 3090",
        aliases=("3090", "rtx3090"),
        total_bytes=_mib(24259), total_bytes_source="reported", nominal_gb=24,
        bf16_dense_tflops=71.0, fp16_dense_tflops=71.0,
        memory_bandwidth_bytes_per_s=936 * _GB, vendor="nvidia",
        note="total_memory seen as 24259-24268 MiB; a display attached takes more",
    ),
    GpuSpec(
        name="rtx-4090", display_name="NVIDIA GeForce RTX 4090",
        aliases=("4090", "rtx4090"),
        total_bytes=_mib(24563), total_bytes_source="reported", nominal_gb=24,
        bf16_dense_tflops=165.2, fp16_dense_tflops=165.2,
        memory_bandwidth_bytes_per_s=1_008 * _GB, vendor="nvidia",
    ),
    GpuSpec(
        name="mi250x", display_name="AMD Instinct MI250X/MI250",
        aliases=("mi250x-gcd",),
        total_bytes=_mib(65520), total_bytes_source="reported", nominal_gb=64,
        bf16_dense_tflops=191.5, fp16_dense_tflops=191.5,
        memory_bandwidth_bytes_per_s=1_600 * _GB, vendor="amd",
        note="one GCD (what torch sees as one device): half of the module's 128 GB, "
        "383 TFLOPS and 3.2 TB/s",
    ),
    GpuSpec(
        name="mi300x", display_name="AMD Instinct MI300X",
        aliases=("mi300x-192gb",),
        total_bytes=_mib(196592), total_bytes_source="reported", nominal_gb=192,
        bf16_dense_tflops=1307.4, fp16_dense_tflops=1307.4,
        memory_bandwidth_bytes_per_s=5_300 * _GB, vendor="amd",
    ),
    GpuSpec(
        name="b200", display_name="NVIDIA B200",
        aliases=("b200-180gb", "hgx-b200"),
        total_bytes=_mib(182631), total_bytes_source="reported", nominal_gb=180,
        bf16_dense_tflops=2250.0, fp16_dense_tflops=2250.0,
        memory_bandwidth_bytes_per_s=8 * _TB_S, vendor="nvidia",
        note="total_memory seen as 182631-182642 MiB; HGX B200 at 1,000 W",
    ),
)

_VENDOR_PREFIXES = ("nvidia-", "amd-instinct-", "amd-", "tesla-", "geforce-")


def _normalize(name: str) -> str:
    key = re.sub(r"[\s_/]+", "-", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):]
                changed = True
    return key


def _build_index() -> dict[str, GpuSpec]:
    index: dict[str, GpuSpec] = {}
    for gpu in GPUS:
        for alias in (gpu.name, _normalize(gpu.display_name), *gpu.aliases):
            key = _normalize(alias)
            if key in index and index[key] is not gpu:
                raise AssertionError(f"GPU alias {key!r} names two catalog entries")
            index[key] = gpu
    return index


_INDEX = _build_index()


def known_gpu_names() -> tuple[str, ...]:
    """Canonical names of the catalog, in catalog order."""
    return tuple(g.name for g in GPUS)


def lookup_gpu(name: str, *, field: str = "gpu") -> GpuSpec:
    """The catalog entry for ``name`` (case, spaces, ``_`` and vendor prefixes ignored).

    Accepts canonical names (``h100-sxm``), aliases (``h100``, ``a100-40gb``) and the device
    name torch prints (``NVIDIA A100-SXM4-80GB``). A name several entries start with (``a100``:
    40 or 80 GB) raises :class:`ConfigError` listing them; any other unknown name raises it
    listing the known names. Messages start with ``field``.
    """
    key = _normalize(name)
    gpu = _INDEX.get(key)
    if gpu is not None:
        return gpu
    variants = _variants(key)
    if len(variants) > 1:
        sizes = sorted({g.nominal_gb for g in variants})
        # "40 or 80 GB?" is the question when the variants differ only in memory.
        question = (" or ".join(str(s) for s in sizes) + " GB?" if len(sizes) == len(variants)
                    else "which one?")
        raise ConfigError(
            f"{field}: {name!r} is ambiguous ({question}); expected one of "
            f"{', '.join(g.name for g in variants)}"
        )
    raise ConfigError(
        f"{field}: got {name!r}, expected one of {', '.join(known_gpu_names())}; "
        f"or give the memory size instead (e.g. --gpu-memory 80GB)"
    )


def _variants(key: str) -> tuple[GpuSpec, ...]:
    """Catalog entries with a name or alias that extends ``key`` by a ``-suffix``."""
    if not key:
        return ()
    return tuple(g for g in GPUS
                 if any(alias.startswith(key + "-") for alias, entry in _INDEX.items()
                        if entry is g))


# Decimal units are powers of 1000, binary (IEC) units powers of 1024. A bare letter (``40G``)
# is binary: that is how nvidia-smi (MiB), torch's messages (GiB), docker and ulimit mean it.
_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, *, field: str = "size") -> int:
    """Bytes in a size written as ``80GB``, ``80GiB``, ``40G``, ``1.5TB``, ``512MiB`` or ``1024``.

    Units, case-insensitive:

    - decimal ``KB``/``MB``/``GB``/``TB`` = 10**3 / 10**6 / 10**9 / 10**12 bytes, as vendors
      print capacities (an "80GB" GPU);
    - binary ``KiB``/``MiB``/``GiB``/``TiB`` = 2**10 / 2**20 / 2**30 / 2**40 bytes, as
      PyTorch's own messages and nvidia-smi print them;
    - a bare letter ``K``/``M``/``G``/``T`` is **binary** (``40G`` = 40 GiB), as nvidia-smi,
      docker and ulimit users mean it;
    - no unit or ``B``: bytes.

    Fractions are rounded to the nearest byte. The result must be positive; anything else
    raises :class:`ConfigError` naming ``field``.
    """
    if isinstance(text, bool):
        raise ConfigError(f"{field}: got {text!r}, expected a size such as 80GB or 40GiB")
    if isinstance(text, int):
        if text <= 0:
            raise ConfigError(f"{field}: got {text}, expected a positive number of bytes")
        return text
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"{field}: got {text!r}, expected a size such as 80GB (10**9), 80GiB (2**30), "
            f"40G (GiB) or a plain byte count"
        )
    try:
        value = Decimal(match.group(1)) * _UNITS[unit]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ConfigError(f"{field}: got {text!r}, which is not a number") from exc
    nbytes = int(value.to_integral_value())
    if nbytes <= 0:
        raise ConfigError(f"{field}: got {text!r}, expected a size above zero")
    return nbytes


def format_bytes(nbytes: int) -> str:
    """``nbytes`` as PyTorch's allocator prints sizes (c10 ``format_size``): two decimals in
    KiB up to 1 MiB, MiB up to 1 GiB, GiB above (no TiB); ``N bytes`` up to 1 KiB."""
    sign = "-" if nbytes < 0 else ""
    size = abs(int(nbytes))
    if size <= 2**10:
        return f"{sign}{size} bytes"
    for unit, scale, upper in (("KiB", 2**10, 2**20), ("MiB", 2**20, 2**30)):
        if size <= upper:
            return f"{sign}{size / scale:.2f} {unit}"
    return f"{sign}{size / 2**30:.2f} GiB"


@dataclass(kw_only=True, frozen=True)
class GpuTarget:
    """The GPU a plan is checked against, as the user named it."""

    memory_bytes: int
    """Memory the device offers one process."""
    label: str
    """How a report names it: the catalog's display name, or the size as given."""
    note: str | None = None
    """How an unusual input was read (a size without a unit); None when it was plain."""


_BARE_NUMBER_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*$")


def gpu_target(gpu: str | None, gpu_memory: str | None, *, gpu_field: str = "gpu",
               memory_field: str = "gpu_memory") -> GpuTarget | None:
    """The GPU named by a catalog name (``gpu``) or a size (``gpu_memory``); None for neither.

    A size without a unit is read as GB (``80`` = 80 GB = 80 x 10**9 bytes, as GPUs are
    marketed), with a note saying so: nobody means an 80-byte GPU. ConfigError when both are
    given, or when either is not understood (the message starts with its field).
    """
    if gpu and gpu_memory:
        raise ConfigError(f"give {gpu_field} NAME or {memory_field} SIZE, not both")
    if gpu:
        entry = lookup_gpu(gpu, field=gpu_field)
        return GpuTarget(memory_bytes=entry.total_bytes,
                         label=f"{entry.display_name} ({entry.total_bytes_source} capacity)")
    if not gpu_memory:
        return None
    if _BARE_NUMBER_RE.match(gpu_memory):
        number = gpu_memory.strip()
        return GpuTarget(
            memory_bytes=parse_size(f"{number}GB", field=memory_field), label=f"{number}GB",
            note=f"{memory_field} {number} has no unit: read as {number}GB "
                 f"({number} x 10^9 bytes); write {number}GiB for {number} x 2^30")
    return GpuTarget(memory_bytes=parse_size(gpu_memory, field=memory_field),
                     label=gpu_memory.strip())
