"""Measure mode against independent oracles.

1. ``torch.distributed._tools.mem_tracker.MemTracker`` over a REAL CPU training loop of the same
   model, optimizer and precision: peak and the params/grads/optimizer categories within 2%.
2. A ``saved_tensors_hooks`` pack hook over a real CPU forward counts the bytes saved for
   backward; measure mode's ``activations_total_bytes`` (+ autocast weight copies) must match.
3. Tracing a ~1B-parameter model must not allocate it (RSS barely moves).
4. Bad input: one-line trainmedic errors.
"""

from __future__ import annotations

import os
import resource
import sys
import textwrap
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from trainmedic.errors import ConfigError, TrainmedicError, UnreadableInputError  # noqa: E402
from trainmedic.memory.measurement import (  # noqa: E402
    FactoryError,
    MeasureConfig,
    load_factory,
    measure,
)

VOCAB = 256


# -- models ---------------------------------------------------------------------------------


class _Cfg:
    vocab_size = VOCAB


class Block(nn.Module):
    def __init__(self, d: int, heads: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.p = heads, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = self.proj(a.transpose(1, 2).reshape(b, s, d))
        x = x + F.dropout(a, self.p, self.training)
        h = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + F.dropout(h, self.p, self.training)


class TinyLM(nn.Module):
    """Embedding, two attention+MLP blocks with LayerNorm, LM head: about 0.5 MB of fp32."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 2, p: float = 0.1) -> None:
        super().__init__()
        self.config = _Cfg()
        self.emb = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, heads, p) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Dropout(0.1), nn.Linear(128, 10))


def mlp_inputs(model: Any, batch: int, seq: int) -> Any:
    return torch.randn(batch, 32), torch.randint(0, 10, (batch,))


class MlpWithTarget(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def image_inputs(model: Any, batch: int, seq: int) -> Any:
    return torch.randn(batch, 3, 16, 16)


def class_loss(out: Any, batch: Any) -> Any:
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long))


def target_loss(out: Any, batch: Any) -> Any:
    return F.cross_entropy(out, batch[1])


def lm_inputs(model: Any, batch: int, seq: int) -> Any:
    return torch.randint(0, VOCAB, (batch, seq))


def lm_loss(out: Any, batch: Any) -> Any:
    return F.cross_entropy(out.flatten(0, 1), batch.flatten())


# -- the oracle: MemTracker over a real CPU loop ----------------------------------------------


def _real_optimizer(name: str, params: Any) -> Any:
    # The optimizers as a CPU user builds them (torch's CPU default is the per-tensor loop).
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.Adafactor(params, lr=1e-2)


def _distinct_storage_bytes(tensors: Any) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def memtracker_loop(
    factory: Callable[[], nn.Module],
    make_batch: Callable[[Any, int, int], Any],
    loss_fn: Callable[[Any, Any], Any],
    *,
    batch: int,
    seq: int,
    precision: str = "fp32",
    optimizer: str = "adamw",
    steps: int = 2,
    set_to_none: bool = True,
) -> tuple[dict[str, int], int, int]:
    """MemTracker's peak snapshot over ``steps`` real CPU training steps, and the bytes of the
    real run's gradients and optimizer state after its last step."""
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    model = factory()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = _real_optimizer(optimizer, model.parameters())
    dtype = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(precision)
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(steps):
            opt.zero_grad(set_to_none=set_to_none)
            data = make_batch(model, batch, seq)
            ctx = torch.autocast("cpu", dtype=dtype) if dtype is not None else nullcontext()
            with ctx:
                out = model(*data) if isinstance(data, tuple) else model(data)
                loss = loss_fn(out, data)
            del out, data
            loss.backward()
            del loss
            opt.step()
            tracker.reset_mod_stats()
    (snap,) = tracker.get_tracker_snapshot("peak").values()
    grads = _distinct_storage_bytes(p.grad for p in model.parameters() if p.grad is not None)
    states = _distinct_storage_bytes(
        v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)
    )
    return {getattr(k, "value", k): v for k, v in snap.items()}, grads, states


def assert_close(ours: int, oracle: int, what: str, rel: float = 0.02) -> None:
    assert abs(ours - oracle) <= rel * max(oracle, 1), f"{what}: ours {ours}, oracle {oracle}"


CASES = [
    # (id, factory, inputs, loss, batch, seq, precision, optimizer, set_to_none)
    ("lm-fp32-adamw", TinyLM, lm_inputs, lm_loss, 4, 32, "fp32", "adamw", True),
    ("lm-small-batch-adam", TinyLM, lm_inputs, lm_loss, 1, 8, "fp32", "adam", True),
    ("lm-bf16mixed-sgdm", TinyLM, lm_inputs, lm_loss, 2, 16, "bf16-mixed", "sgd-momentum", True),
    ("lm-bf16-adafactor", TinyLM, lm_inputs, lm_loss, 2, 16, "bf16", "adafactor", True),
    ("lm-keep-grads", TinyLM, lm_inputs, lm_loss, 1, 8, "fp32", "sgd", False),
    ("mlp-adamw", MlpWithTarget, mlp_inputs, target_loss, 8, 1, "fp32", "adamw", True),
    ("conv-bn-adam", convnet, image_inputs, class_loss, 4, 1, "fp32", "adam", True),
]


@pytest.mark.parametrize(
    "factory,inputs,loss,batch,seq,precision,optimizer,set_to_none",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_measure_matches_memtracker_on_a_real_cpu_step(
    factory: Any,
    inputs: Any,
    loss: Any,
    batch: int,
    seq: int,
    precision: str,
    optimizer: str,
    set_to_none: bool,
) -> None:
    config = MeasureConfig(
        batch_size=batch,
        seq_len=seq,
        inputs=inputs,
        loss=loss,
        precision=precision,
        optimizer=optimizer,
        zero_grad_set_to_none=set_to_none,
    )
    ledger = measure(factory, config)
    oracle, real_grads, real_states = memtracker_loop(
        factory,
        inputs,
        loss,
        batch=batch,
        seq=seq,
        precision=precision,
        optimizer=optimizer,
        set_to_none=set_to_none,
    )
    cats = ledger.categories
    assert_close(ledger.peak_bytes, oracle["Total"], "peak")
    assert ledger.peak_bytes == ledger.total_bytes
    assert_close(cats["params"], oracle["Parameter"], "params")
    assert_close(cats["buffers"], oracle["Buffer"], "buffers")
    # MemTracker labels a storage by what it knows at the instant: a gradient stays "Temp"
    # until its accumulate hook has run, and everything made inside optimizer.step() is
    # "Optstate", the step's temporaries included. Ours are roles of the storage. So:
    # MemTracker's gradients <= ours, and its Optstate lies between our optimizer state and
    # our optimizer state plus temporaries.
    assert oracle["Gradient"] <= cats["grads"] * 1.02
    assert cats["optimizer"] <= oracle["Optstate"] * 1.02
    assert oracle["Optstate"] <= (cats["optimizer"] + cats["temporaries"]) * 1.02
    # Against the real run's own objects: the optimizer state is whole from the first
    # optimizer step on, and every gradient is alive in the optimizer phase (and always,
    # from the second step, when zero_grad keeps them).
    state_alive = ledger.peak_phase == "optimizer" or ledger.details["peak_step"] >= 1
    assert_close(cats["optimizer"], real_states if state_alive else 0, "optimizer")
    if ledger.peak_phase == "optimizer" or (not set_to_none and ledger.details["peak_step"] >= 1):
        assert_close(cats["grads"], real_grads, "grads")
    else:
        assert cats["grads"] <= real_grads
    assert set(ledger.basis.values()) == {"measured"}


def test_the_oracle_cases_cover_grads_optimizer_state_and_buffers_at_the_peak() -> None:
    # The comparisons above only bite where the category is non-zero at the peak.
    keep = measure(
        TinyLM,
        MeasureConfig(batch_size=1, seq_len=8, inputs=lm_inputs, loss=lm_loss, optimizer="sgd",
                      zero_grad_set_to_none=False),
    )
    small = measure(
        TinyLM, MeasureConfig(batch_size=1, seq_len=8, inputs=lm_inputs, loss=lm_loss)
    )
    conv = measure(
        convnet,
        MeasureConfig(batch_size=4, seq_len=1, inputs=image_inputs, loss=class_loss),
    )
    assert keep.categories["grads"] > 0
    assert small.peak_phase == "optimizer" and small.categories["optimizer"] > 0
    assert conv.categories["buffers"] > 0


def test_default_inputs_and_loss_use_the_vocab_and_cross_entropy() -> None:
    # Defaults: token ids from config.vocab_size and cross-entropy over (b, s, V) logits; the
    # explicit lm_inputs/lm_loss are exactly that, so the ledgers agree to the byte.
    default = measure(TinyLM, MeasureConfig(batch_size=2, seq_len=16))
    explicit = measure(
        TinyLM, MeasureConfig(batch_size=2, seq_len=16, inputs=lm_inputs, loss=lm_loss)
    )
    assert default.peak_bytes == explicit.peak_bytes
    assert dict(default.categories) == dict(explicit.categories)


# -- oracle 2: bytes saved for backward over a real forward ----------------------------------


def saved_bytes_real(
    factory: Callable[[], nn.Module], batch: int, seq: int, precision: str = "fp32"
) -> int:
    """Distinct non-parameter storages autograd saves in a real CPU forward + loss."""
    torch.manual_seed(0)
    model = factory().train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t.detach()

    ids = torch.randint(0, VOCAB, (batch, seq))
    mixed = precision == "bf16-mixed"
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mixed else nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        lm_loss(model(ids), ids)
    return sum(seen.values())


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_activations_total_equals_the_bytes_saved_for_backward(precision: str) -> None:
    ledger = measure(
        TinyLM, MeasureConfig(batch_size=4, seq_len=32, precision=precision, optimizer="sgd")
    )
    oracle = saved_bytes_real(TinyLM, 4, 32, precision)
    casts = ledger.details["param_cast_bytes"]
    assert ledger.activations_total_bytes + casts == oracle
    if precision == "bf16-mixed":
        # autocast's bf16 copies of the Linear weights (not the embedding, not LayerNorm)
        linear_weights = sum(
            m.weight.numel() for m in TinyLM().modules() if isinstance(m, nn.Linear)
        )
        assert casts == 2 * linear_weights
    else:
        assert casts == 0


def test_per_module_attribution_of_a_hand_counted_mlp() -> None:
    batch = 8
    ledger = measure(
        lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)),
        MeasureConfig(
            batch_size=batch, seq_len=1, inputs=lambda m, b, s: torch.randn(b, 16),
            optimizer="sgd",
        ),
    )
    acts = {m.module: m.bytes for m in ledger.per_module if m.category == "activations"}
    params = {m.module: m.bytes for m in ledger.per_module if m.category == "params"}
    # Linear keeps its input, GELU its input, the last Linear the GELU output (fp32).
    assert acts == {"0": batch * 16 * 4, "1": batch * 32 * 4, "2": batch * 32 * 4}
    assert params == {"0": (16 * 32 + 32) * 4, "2": (32 * 8 + 8) * 4}
    assert ledger.activations_total_bytes == sum(acts.values())
    assert ledger.num_params == 16 * 32 + 32 + 32 * 8 + 8


# -- oracle 3: nothing is allocated ---------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_1b_parameter_model_traces_without_allocating_it() -> None:
    width, layers = 8192, 16  # 1.07e9 parameters: 4.3 GB of fp32 weights if real
    n = layers * (width * width + width)
    before, peak_before = _rss_bytes(), _max_rss_bytes()
    ledger = measure(
        lambda: nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))),
        MeasureConfig(batch_size=2, seq_len=1, inputs=lambda m, b, s: torch.randn(b, width)),
    )
    grown = max(_rss_bytes() - before, _max_rss_bytes() - peak_before)
    assert grown < 200 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB"
    assert ledger.num_params == n
    assert ledger.categories["params"] == 4 * n
    # AdamW: two fp32 moments per parameter and one fp32 step count per tensor (torch.optim).
    assert ledger.categories["optimizer"] == 8 * n + 4 * 2 * layers
    assert ledger.peak_phase == "optimizer"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_llama_shaped_model_traces_in_seconds_without_allocating() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=2,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
    )
    with torch.device("meta"):
        n = sum(p.numel() for p in transformers.LlamaForCausalLM(config).parameters())
    before, peak_before = _rss_bytes(), _max_rss_bytes()
    ledger = measure(
        lambda: transformers.LlamaForCausalLM(config),
        MeasureConfig(batch_size=1, seq_len=256, precision="bf16-mixed"),
    )
    grown = max(_rss_bytes() - before, _max_rss_bytes() - peak_before)
    assert grown < 400 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB for {4 * n / 2**30:.1f} GiB"
    assert ledger.num_params == n
    assert ledger.categories["params"] == 4 * n


# -- bad input ------------------------------------------------------------------------------


def _boom() -> nn.Module:
    raise ValueError("no such layer size")


def test_a_factory_that_raises_is_a_one_line_factory_error() -> None:
    with pytest.raises(FactoryError) as info:
        measure(_boom, MeasureConfig(batch_size=1, seq_len=4))
    message = str(info.value)
    assert "_boom" in message and "ValueError" in message and "no such layer size" in message
    assert "\n" not in message
    assert isinstance(info.value, TrainmedicError)


def test_a_factory_that_returns_no_module() -> None:
    with pytest.raises(FactoryError, match="returned int, expected a torch.nn.Module"):
        measure(lambda: 3, MeasureConfig(batch_size=1, seq_len=4))


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": -2}, "batch_size"),
        ({"seq_len": 0}, "seq_len"),
        ({"steps": 0}, "steps"),
        ({"precision": "fp8"}, "precision"),
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"device_profile": "tpu"}, "device_profile"),
        ({"inputs": 3}, "inputs"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    settings: dict[str, Any] = {"batch_size": 1, "seq_len": 4, **kwargs}
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        MeasureConfig(**settings)


@pytest.mark.parametrize("name", ["lion", "adam-8bit"])
def test_planner_only_optimizers_point_to_the_planner(name: str) -> None:
    with pytest.raises(ConfigError, match="not supported in measure mode.*memory plan"):
        MeasureConfig(batch_size=1, seq_len=4, optimizer=name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_profile_without_a_gpu_says_the_planner_is_analytic() -> None:
    with pytest.raises(ConfigError, match="needs a visible CUDA GPU.*analytic"):
        measure(TinyLM, MeasureConfig(batch_size=1, seq_len=4, device_profile="cuda"))


def test_a_model_without_vocab_needs_inputs() -> None:
    with pytest.raises(ConfigError, match="^inputs: Sequential has no config.vocab_size"):
        measure(mlp, MeasureConfig(batch_size=1, seq_len=4))


def test_a_loss_that_is_not_a_scalar() -> None:
    with pytest.raises(FactoryError, match=r"loss of .* is \(2, 10\), expected a one-element"):
        measure(
            mlp,
            MeasureConfig(
                batch_size=2, seq_len=1, inputs=lambda m, b, s: torch.randn(b, 32),
                loss=lambda out, batch: out,
            ),
        )


def test_a_forward_that_fails_names_the_phase() -> None:
    with pytest.raises(FactoryError, match="failed in the forward phase: RuntimeError"):
        measure(
            mlp,
            MeasureConfig(batch_size=2, seq_len=1, inputs=lambda m, b, s: torch.randn(b, 7)),
        )


# -- load_factory ---------------------------------------------------------------------------


FACTORY_SOURCE = textwrap.dedent(
    """
    import torch

    def build():
        return torch.nn.Linear(4, 4)

    NOT_CALLABLE = 3
    """
)


def test_load_factory_from_a_module_and_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tm_factory_mod.py").write_text(FACTORY_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tm_factory_mod", raising=False)
    by_module = load_factory("tm_factory_mod:build")
    by_file = load_factory(f"{tmp_path / 'tm_factory_mod.py'}:build")
    assert isinstance(by_module(), nn.Linear) and isinstance(by_file(), nn.Linear)
    ledger = measure(
        by_file, MeasureConfig(batch_size=2, seq_len=1, inputs=lambda m, b, s: torch.randn(b, 4))
    )
    assert ledger.num_params == 20


@pytest.mark.parametrize(
    "spec,error,pattern",
    [
        ("no_colon_here", FactoryError, "expected module:function"),
        ("tm_no_such_module_xyz:build", FactoryError, "no module named 'tm_no_such_module_xyz'"),
        ("tm_factory_mod2:missing", FactoryError, "has no attribute 'missing'"),
        ("tm_factory_mod2:NOT_CALLABLE", FactoryError, "NOT_CALLABLE is a int, expected a "
         "callable"),
        ("does/not/exist.py:build", UnreadableInputError, "no such Python file"),
    ],
)
def test_load_factory_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, error: type, pattern: str
) -> None:
    (tmp_path / "tm_factory_mod2.py").write_text(FACTORY_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tm_factory_mod2", raising=False)
    with pytest.raises(error, match=pattern) as info:
        load_factory(spec)
    assert "\n" not in str(info.value)


# -- a GPU machine: fake CUDA kernels vs MemTracker over a real CUDA step ---------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_matches_memtracker_on_a_real_cuda_step() -> None:
    from torch.distributed._tools.mem_tracker import MemTracker

    batch, seq = 4, 64
    ledger = measure(
        TinyLM, MeasureConfig(batch_size=batch, seq_len=seq, device_profile="cuda")
    )
    torch.manual_seed(0)
    model = TinyLM().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            ids = torch.randint(0, VOCAB, (batch, seq), device="cuda")
            loss = lm_loss(model(ids), ids)
            del ids
            loss.backward()
            del loss
            opt.step()
            tracker.reset_mod_stats()
    (snap,) = tracker.get_tracker_snapshot("peak").values()
    oracle = {getattr(k, "value", k): v for k, v in snap.items()}
    assert_close(ledger.peak_bytes, oracle["Total"], "peak")
    assert_close(ledger.categories["optimizer"], oracle["Optstate"], "optimizer")


def _fails_under_fake_mode() -> nn.Module:
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(torch.empty(1), FakeTensor):
        raise RuntimeError("this constructor cannot run on fake tensors")
    return MlpWithTarget()


def test_a_model_that_fake_tensors_refuse_is_built_on_meta() -> None:
    config = MeasureConfig(batch_size=8, seq_len=1, inputs=mlp_inputs, loss=target_loss)
    on_meta = measure(_fails_under_fake_mode, config)
    on_fake = measure(MlpWithTarget, config)
    assert on_meta.details["built_on"] == "meta" and on_fake.details["built_on"] == "fake"
    assert on_meta.peak_bytes == on_fake.peak_bytes
    assert dict(on_meta.categories) == dict(on_fake.categories)


def test_a_factory_that_returns_a_model_built_before_is_refused() -> None:
    built = nn.Linear(4, 4)  # real memory, made outside measure's fake mode
    with pytest.raises(FactoryError, match=r"made real tensors \(weight and 1 more"):
        measure(lambda: built, MeasureConfig(batch_size=1, seq_len=1))


def test_measure_leaves_no_global_hooks_behind() -> None:
    from torch.nn.modules import module as module_mod

    before = (len(module_mod._global_forward_pre_hooks), len(module_mod._global_forward_hooks))
    measure(TinyLM, MeasureConfig(batch_size=1, seq_len=8, optimizer="sgd"))
    with pytest.raises(FactoryError):
        measure(mlp, MeasureConfig(batch_size=1, seq_len=1, inputs=lambda m, b, s: torch.ones(3)))
    after = (len(module_mod._global_forward_pre_hooks), len(module_mod._global_forward_hooks))
    assert after == before
    assert not torch._C._autograd._top_saved_tensors_default_hooks(False)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_hf_models_with_default_inputs_match_memtracker(family: str, precision: str) -> None:
    transformers = pytest.importorskip("transformers")

    def build() -> nn.Module:
        if family == "gpt2":
            config = transformers.GPT2Config(
                n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                bos_token_id=0, eos_token_id=0,
            )
            return transformers.GPT2LMHeadModel(config)
        config = transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
        )
        return transformers.LlamaForCausalLM(config)

    def ids(model: Any, b: int, s: int) -> Any:
        return torch.randint(0, 1000, (b, s))

    def loss(out: Any, batch: Any) -> Any:
        return F.cross_entropy(out.logits.flatten(0, 1), batch.flatten())

    ledger = measure(build, MeasureConfig(batch_size=2, seq_len=32, precision=precision))
    oracle, _, real_states = memtracker_loop(build, ids, loss, batch=2, seq=32,
                                             precision=precision)
    assert_close(ledger.peak_bytes, oracle["Total"], "peak")
    assert_close(ledger.categories["params"], oracle["Parameter"], "params")
    assert_close(ledger.categories["optimizer"], real_states, "optimizer")
