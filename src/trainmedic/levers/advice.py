"""``trainmedic advise``: the boring default stack for a new run, each choice with a reason and
a citation; a learning rate from model size and batch (a heuristic with its formula); what to
measure for the critical batch; which lever to change first per symptom (from the router's
tables); and the settings of a recipe that contradict the stack, with why.

Every recommendation is a default (``basis: estimated``), never a measurement. The settings
come from a recipe (:func:`settings_from_recipe`, imports torch) or an HF config
(:func:`settings_from_config`, no torch); :func:`advise` is pure over them.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainmedic.diagnose.rules import CAUSES
from trainmedic.diagnose.triage import generic_intervention
from trainmedic.errors import ConfigError

if TYPE_CHECKING:
    from trainmedic.recipe.recipe import Recipe

__all__ = ["Settings", "StackItem", "Contradiction", "FirstLever", "LrAdvice", "Advice",
           "advise", "settings_from_recipe", "settings_from_config", "lr_for_size", "CITES",
           "SCHEMA", "GPT3_TABLE"]

log = logging.getLogger(__name__)

SCHEMA = "trainmedic.advice/1"

#: Sources, each checked against the paper it names (titles and venues as published).
CITES: dict[str, str] = {
    "adamw": "Loshchilov & Hutter 2019, Decoupled Weight Decay Regularization (ICLR 2019)",
    "warmup": "Goyal et al. 2017, Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour "
              "(gradual warm-up)",
    "radam": "Liu et al. 2020, On the Variance of the Adaptive Learning Rate and Beyond "
             "(ICLR 2020): Adam's early steps have a high-variance adaptive lr without warm-up",
    "cosine": "Loshchilov & Hutter 2017, SGDR: Stochastic Gradient Descent with Warm Restarts "
              "(ICLR 2017)",
    "wsd": "Hu et al. 2024, MiniCPM (arXiv:2404.06395), warmup-stable-decay; Hägele et al. "
           "2024, Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations",
    "bf16": "Kalamkar et al. 2019, A Study of BFLOAT16 for Deep Learning Training",
    "fp16": "Micikevicius et al. 2018, Mixed Precision Training (ICLR 2018): loss scaling and "
            "fp32 master weights",
    "bf16_pure": "Zamirai et al. 2020, Revisiting BFloat16 Training: bf16 weights lose small "
                 "updates without stochastic rounding or Kahan summation",
    "clip": "Pascanu, Mikolov & Bengio 2013, On the difficulty of training recurrent neural "
            "networks (ICML 2013)",
    "gpt3": "Brown et al. 2020, Language Models are Few-Shot Learners (GPT-3), Table 2.1 and "
            "Appendix B (AdamW betas 0.9/0.95, eps 1e-8, weight decay 0.1, clip 1.0, cosine "
            "to 10%)",
    "llama2": "Touvron et al. 2023, Llama 2 (AdamW betas 0.9/0.95, eps 1e-5, weight decay "
              "0.1, clip 1.0, 2000 warm-up steps, cosine to 10%)",
    "noise": "McCandlish et al. 2018, An Empirical Model of Large-Batch Training (gradient "
             "noise scale, critical batch)",
    "sqrt": "Malladi et al. 2022, On the SDEs and Scaling Rules for Adaptive Gradient "
            "Algorithms (NeurIPS 2022): square-root lr scaling with batch for Adam",
    "no_decay_norms": "Devlin et al. 2019, BERT reference code (google-research/bert "
                      "optimization.py excludes LayerNorm and bias from weight decay)",
}

#: (parameters, peak lr, batch in tokens) of the eight GPT-3 models (Brown et al. 2020,
#: Table 2.1): the anchors of the lr-by-size heuristic.
GPT3_TABLE: tuple[tuple[float, float, float], ...] = (
    (125e6, 6.0e-4, 0.5e6), (350e6, 3.0e-4, 0.5e6), (760e6, 2.5e-4, 0.5e6),
    (1.3e9, 2.0e-4, 1e6), (2.7e9, 1.6e-4, 1e6), (6.7e9, 1.2e-4, 2e6), (13e9, 1.0e-4, 2e6),
    (175e9, 0.6e-4, 3.2e6),
)

#: An Adam lr at or above this is "high" without warm-up: GPT-3's largest peak lr was 6e-4
#: (125M params), and even it warmed up.
HIGH_ADAM_LR = 1e-3
#: The adaptive-lr floor eps: above this it damps updates of small-gradient parameters (Llama
#: 2 used 1e-5, GPT-3 1e-8).
EPS_MAX = 1e-5
#: fp16's smallest subnormal is 2**-24 ~ 5.96e-8: a smaller eps kept in fp16 state rounds to 0.
FP16_TINY = 2.0 ** -24
#: Warm-up detection, as the router's ``lr_starts_at_peak`` check: a first lr at >= 90% of the
#: peak is no warm-up.
NO_WARMUP_RATIO = 0.9

Severity = Literal["warning", "minor"]


@dataclass(kw_only=True, frozen=True)
class Settings:
    """What a run is set to; ``None`` where the source does not say."""

    source: str
    """The recipe spec or the config path."""
    num_params: int | None = None
    """Trainable parameters."""
    optimizer: str | None = None
    """The optimizer class name (AdamW, Adam, SGD, ...)."""
    lr: float | None = None
    """Peak learning rate of the first param group."""
    weight_decay: float | None = None
    """Weight decay of the first param group."""
    eps: float | None = None
    """Adam's eps."""
    betas: tuple[float, float] | None = None
    """Adam's betas."""
    warmup_steps: int | None = None
    """Steps until the lr reaches its peak (0: starts at the peak)."""
    decays: bool | None = None
    """Whether the lr falls after its peak within the schedule's horizon."""
    precision: str | None = None
    """fp32, bf16-mixed or fp16-mixed (the recipe's autocast)."""
    param_dtype: str | None = None
    """The dtype most parameters are stored in (float32, bfloat16, float16)."""
    scaler: bool | None = None
    """Whether a GradScaler is used."""
    max_grad_norm: float | None = None
    """The clip; None with ``clip_known`` means no clipping."""
    clip_known: bool = False
    """Whether the source says how gradients are clipped."""
    batch_size: int | None = None
    """Samples per micro-batch."""
    grad_accum: int | None = None
    """Micro-batches per optimizer step."""
    seq_len: int | None = None
    """Tokens per sample."""
    decayed_1d_params: int | None = None
    """Parameters with <= 1 dimension (norm weights, biases) in groups with weight decay > 0."""

    def __post_init__(self) -> None:
        for name in ("num_params", "batch_size", "grad_accum", "seq_len"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{name}: got {v!r}, expected an integer >= 1")

    @property
    def tokens_per_step(self) -> int | None:
        if self.batch_size is None or self.seq_len is None:
            return None
        return self.batch_size * (self.grad_accum or 1) * self.seq_len

    @property
    def adam_family(self) -> bool:
        return bool(self.optimizer) and "adam" in str(self.optimizer).lower()


@dataclass(frozen=True)
class StackItem:
    topic: str
    recommendation: str
    reason: str
    citation: str
    yours: str | None = None
    status: str = "unknown"
    """``matches``, ``differs`` or ``unknown`` (the source does not say)."""

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "recommendation": self.recommendation,
                "basis": "estimated", "default": True, "reason": self.reason,
                "citation": self.citation, "yours": self.yours, "status": self.status}


@dataclass(frozen=True)
class Contradiction:
    code: str
    severity: Severity
    setting: str
    why: str
    fix: str
    citation: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FirstLever:
    symptom: str
    lever: str
    because: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LrAdvice:
    lr: float | None
    formula: str
    note: str
    reference_batch_tokens: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "basis": "estimated", "formula": self.formula,
                "note": self.note, "reference_batch_tokens": self.reference_batch_tokens}


@dataclass(frozen=True)
class Advice:
    settings: Settings
    stack: tuple[StackItem, ...]
    lr: LrAdvice
    batch: str
    contradictions: tuple[Contradiction, ...]
    first_levers: tuple[FirstLever, ...]

    def to_json(self) -> dict[str, Any]:
        s = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.settings.__dict__.items()}
        s["tokens_per_step"] = self.settings.tokens_per_step
        return {"schema": SCHEMA, "basis": "estimated",
                "note": "every recommendation is a default to start from, not a measurement",
                "settings": s, "stack": [i.to_dict() for i in self.stack],
                "lr": self.lr.to_dict(), "batch": self.batch,
                "contradictions": [c.to_dict() for c in self.contradictions],
                "first_levers": [f.to_dict() for f in self.first_levers]}


# --------------------------------------------------------------------------- lr and batch
def lr_for_size(num_params: float, tokens_per_step: float | None = None) -> LrAdvice:
    """The peak AdamW lr by size from GPT-3's table, scaled down by sqrt(B / B_ref) for a
    smaller batch. Outside the table's 125M-175B range no number is given."""
    lo, hi = GPT3_TABLE[0][0], GPT3_TABLE[-1][0]
    base = ("lr(N) = exp(interp(ln N; ln N_i -> ln lr_i)) over GPT-3's (N_i, lr_i) "
            "(Brown et al. 2020, Table 2.1)")
    if not lo <= num_params <= hi:
        return LrAdvice(None, base, f"{num_params:.3g} parameters is outside the table's "
                        f"{lo:.3g}-{hi:.3g} range: no heuristic lr; run an lr range test (sweep "
                        "by factors of 3 and keep the largest lr that stays stable)")
    xs = [math.log(n) for n, _, _ in GPT3_TABLE]
    x = math.log(num_params)
    i = max(k for k in range(len(xs)) if xs[k] <= x) if x < xs[-1] else len(xs) - 2
    t = (x - xs[i]) / (xs[i + 1] - xs[i])
    lr = math.exp((1 - t) * math.log(GPT3_TABLE[i][1]) + t * math.log(GPT3_TABLE[i + 1][1]))
    b_ref = math.exp((1 - t) * math.log(GPT3_TABLE[i][2]) + t * math.log(GPT3_TABLE[i + 1][2]))
    note = "a heuristic starting point, not a measurement: sweep x3 up and down around it"
    formula = base
    if tokens_per_step is not None and tokens_per_step < b_ref:
        lr *= math.sqrt(tokens_per_step / b_ref)
        formula += (f" x sqrt(B / B_ref) with B = {tokens_per_step:,} tokens/step, B_ref = "
                    f"{b_ref:,.0f} (GPT-3's batch at this size; square-root rule, Malladi et "
                    "al. 2022)")
    return LrAdvice(lr, formula, note, b_ref)


def _batch_text(s: Settings, lr: LrAdvice) -> str:
    tok = s.tokens_per_step
    have = f"{tok:,} tokens per optimizer step" if tok else "tokens per step unknown"
    ref = (f"; GPT-3 used {lr.reference_batch_tokens:,.0f} at this size"
           if lr.reference_batch_tokens else "")
    return (f"{have}{ref}. The critical batch must be measured, not assumed (McCandlish et "
            "al. 2018): the simple noise scale B_simple = tr(Sigma) / |G|^2, from gradient "
            "norms at two batch sizes B_s < B_b: |G|^2 ~ (B_b |G_b|^2 - B_s |G_s|^2) / "
            "(B_b - B_s), tr(Sigma) ~ (|G_s|^2 - |G_b|^2) / (1/B_s - 1/B_b). Below B_simple a "
            "bigger batch buys near-linear speed-up; far above it, compute is wasted.")


# --------------------------------------------------------------------------- the stack
def _fmt(v: Any) -> str:
    return "unknown" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def _stack(s: Settings, lr: LrAdvice) -> tuple[StackItem, ...]:
    def st(ok: bool | None) -> str:
        return "unknown" if ok is None else ("matches" if ok else "differs")

    opt = s.optimizer
    warm = None if s.warmup_steps is None else s.warmup_steps > 0
    sched = None if s.decays is None or warm is None else (s.decays and warm)
    prec = s.precision
    prec_ok = None if prec is None else (prec == "bf16-mixed")
    clip_ok = None if not s.clip_known else (s.max_grad_norm is not None
                                             and s.max_grad_norm <= 1.0)
    wd_ok = None if s.weight_decay is None else abs(s.weight_decay - 0.1) < 1e-12
    eps_ok = None if s.eps is None else (1e-8 <= s.eps <= EPS_MAX and (
        s.betas is None or abs(s.betas[1] - 0.95) < 1e-9))
    lr_ok = None if lr.lr is None or s.lr is None else lr.lr / 3 <= s.lr <= lr.lr * 3
    return (
        StackItem("optimizer", "AdamW (decoupled weight decay)",
                  "Adam's L2 term is scaled by the adaptive lr, so it regularizes unevenly; "
                  "AdamW applies weight decay directly to the weights", CITES["adamw"],
                  _fmt(opt), st(None if opt is None else opt == "AdamW")),
        StackItem("schedule", "linear warm-up over 1-5% of steps, then cosine to 10% of the "
                  "peak, or warmup-stable-decay (a decay over the last 10-20%) when the "
                  "length is not fixed", "warm-up keeps Adam's first steps from moving on "
                  "noisy second-moment estimates; a decay at the end lowers the loss it "
                  "settles at", f"{CITES['warmup']}; {CITES['radam']}; {CITES['cosine']}; "
                  f"{CITES['wsd']}",
                  f"warm-up {_fmt(s.warmup_steps)} steps, decays: {_fmt(s.decays)}", st(sched)),
        StackItem("precision", "bf16 autocast with fp32 weights (fp16 only with a "
                  "GradScaler)", "bf16 has fp32's exponent range: no loss scaling and no "
                  "overflow where fp16 needs both", f"{CITES['bf16']}; {CITES['fp16']}",
                  f"{_fmt(prec)}, weights {_fmt(s.param_dtype)}", st(prec_ok)),
        StackItem("gradient clipping", "clip the global gradient norm at 1.0",
                  "caps the step a rare huge gradient takes", f"{CITES['clip']}; "
                  f"{CITES['gpt3']}", _fmt(s.max_grad_norm) if s.clip_known else "unknown",
                  st(clip_ok)),
        StackItem("learning rate", f"{lr.lr:.2g}" if lr.lr else "an lr range test",
                  f"{lr.formula}; {lr.note}", f"{CITES['gpt3']}; {CITES['sqrt']}",
                  _fmt(s.lr), st(lr_ok)),
        StackItem("weight decay", "0.1 on matrices; none on norms, biases and embeddings' "
                  "1-D parameters", "the value of GPT-3 and Llama 2 pre-training",
                  f"{CITES['gpt3']}; {CITES['llama2']}; {CITES['no_decay_norms']}",
                  _fmt(s.weight_decay), st(wd_ok)),
        StackItem("adam eps and betas", "eps 1e-8 (up to 1e-5), betas (0.9, 0.95)",
                  "a larger eps damps updates of parameters with small gradients; beta2 0.95 "
                  "reacts faster to gradient changes than 0.999", f"{CITES['gpt3']}; "
                  f"{CITES['llama2']}", f"eps {_fmt(s.eps)}, betas {_fmt(s.betas)}",
                  st(eps_ok)),
    )


# --------------------------------------------------------------------------- contradictions
def _contradictions(s: Settings) -> list[Contradiction]:
    out: list[Contradiction] = []
    fp16 = s.precision == "fp16-mixed" or s.param_dtype == "float16"
    if fp16 and s.scaler is False:
        out.append(Contradiction(
            "fp16_without_scaler", "warning", "fp16 without a GradScaler",
            "fp16's smallest normal is 6.1e-5: small gradients underflow to 0 and large "
            "ones overflow to inf without loss scaling", "train in bf16 autocast, or add "
            "torch.amp.GradScaler()", CITES["fp16"]))
    if s.param_dtype == "float16":
        out.append(Contradiction(
            "fp16_weights", "warning", "parameters stored in float16",
            "updates smaller than fp16's spacing at a weight's value are rounded away; mixed "
            "precision keeps fp32 master weights", "keep the weights in fp32 and autocast "
            "the forward (precision='bf16-mixed')", CITES["fp16"]))
    if s.param_dtype == "bfloat16":
        out.append(Contradiction(
            "bf16_weights", "warning", "parameters stored in bfloat16",
            "bf16 has 8 significant bits: an update below ~1/256 of a weight is lost",
            "keep fp32 weights with bf16 autocast", CITES["bf16_pure"]))
    if s.adam_family and s.warmup_steps == 0 and s.lr is not None:
        high = s.lr >= HIGH_ADAM_LR
        out.append(Contradiction(
            "no_warmup", "warning" if high else "minor",
            f"{s.optimizer} at lr {s.lr:g} with no warm-up",
            "Adam's second-moment estimate is built from a few gradients in the first steps, "
            "so its adaptive lr is large and noisy then" + (f"; at lr >= {HIGH_ADAM_LR:g} "
                                                            "that can diverge" if high else ""),
            "warm the lr up linearly over the first 1-5% of steps",
            f"{CITES['radam']}; {CITES['warmup']}"))
    if s.optimizer == "Adam" and s.weight_decay:
        out.append(Contradiction(
            "adam_l2", "warning", f"Adam with weight_decay={s.weight_decay:g}",
            "torch.optim.Adam adds the decay to the gradient (L2), where the adaptive lr "
            "scales it per parameter: not the weight decay AdamW applies",
            "use torch.optim.AdamW with the same weight_decay", CITES["adamw"]))
    if s.decayed_1d_params:
        out.append(Contradiction(
            "decay_on_norms_biases", "minor",
            f"{s.decayed_1d_params} norm/bias parameter(s) with weight decay > 0",
            "decaying norm gains and biases pulls them toward 0 without a regularizing "
            "benefit", "put parameters with p.ndim < 2 in a param group with "
            "weight_decay=0.0", CITES["no_decay_norms"]))
    if s.adam_family and s.eps is not None:
        if s.eps > EPS_MAX:
            out.append(Contradiction(
                "eps_large", "minor", f"eps {s.eps:g}",
                f"an eps above {EPS_MAX:g} is a floor under sqrt(v): parameters with small "
                "gradients get a much smaller step than Adam intends",
                "use eps 1e-8 (bf16 autocast with fp32 state handles it)",
                f"{CITES['gpt3']}; {CITES['llama2']}"))
        elif s.eps < FP16_TINY and s.param_dtype == "float16":
            # bf16 shares fp32's exponent range, so a small eps stays representable there.
            out.append(Contradiction(
                "eps_small_for_dtype", "warning", f"eps {s.eps:g} with {s.param_dtype} state",
                "below fp16's smallest subnormal (5.96e-8) eps rounds to 0 in fp16 optimizer "
                "state, so a parameter with v = 0 divides by 0",
                "keep optimizer state in fp32, or raise eps to 1e-6", CITES["fp16"]))
    if s.clip_known and s.max_grad_norm is None:
        out.append(Contradiction(
            "no_clipping", "warning", "no gradient clipping",
            "one outlier batch can take a step as large as its gradient, a loss spike or a "
            "divergence", "clip at 1.0 (Recipe(max_grad_norm=1.0), HF max_grad_norm=1.0)",
            CITES["clip"]))
    if s.decays is False:
        out.append(Contradiction(
            "no_decay", "minor", "the lr does not decay",
            "a constant lr settles at a higher loss than one decayed at the end",
            "decay with cosine to 10%, or a WSD cool-down over the last 10-20% of steps",
            f"{CITES['cosine']}; {CITES['wsd']}"))
    return out


# --------------------------------------------------------------------------- first levers
def _applies(s: Settings, check: str | None) -> bool:
    """Whether a router cause can apply to these settings (the fp16 causes need fp16, the
    no-warm-up cause needs no warm-up)."""
    if check == "loss_scale_logged":
        return s.precision in (None, "fp16-mixed") or s.param_dtype == "float16"
    if check == "lr_starts_at_peak":
        return s.warmup_steps in (None, 0)
    return True


def _first_levers(s: Settings) -> tuple[FirstLever, ...]:
    out = []
    for symptom, rules in CAUSES.items():
        for r in sorted(rules, key=lambda r: {"high": 0, "medium": 1, "low": 2}[r.likelihood]):
            if not r.interventions or not _applies(s, r.check):
                continue
            iv = generic_intervention(r.interventions[0])
            if iv is not None:
                out.append(FirstLever(symptom, iv.action, r.cause.replace("{k}", "k")))
                break
    return tuple(out)


def advise(settings: Settings) -> Advice:
    """The default stack against ``settings`` (pure)."""
    lr = (lr_for_size(settings.num_params, settings.tokens_per_step)
          if settings.num_params else
          LrAdvice(None, "lr(N) from GPT-3's table needs the parameter count", "unknown size"))
    return Advice(settings=settings, stack=_stack(settings, lr), lr=lr,
                  batch=_batch_text(settings, lr),
                  contradictions=tuple(_contradictions(settings)),
                  first_levers=_first_levers(settings))


# --------------------------------------------------------------------------- sources
def settings_from_config(path: str, *, batch: int | None = None, seq: int | None = None,
                         grad_accum: int | None = None) -> Settings:
    """Settings from an HF config.json: the parameter count (``memory.load_spec``) and, with
    ``batch``/``seq``, the tokens per step. The optimizer and schedule are not in a config."""
    from trainmedic.memory.families import load_spec

    spec = load_spec(path)
    return Settings(source=str(path), num_params=spec.num_params, batch_size=batch,
                    seq_len=seq, grad_accum=grad_accum)


def _lr_curve(recipe: Recipe, steps: int) -> list[float]:
    """The first param group's lr over ``steps`` scheduler steps, the recipe left as found."""
    opt, sch = recipe.optimizer, recipe.scheduler
    if sch is None:
        return [float(opt.param_groups[0]["lr"])] * 2
    lambdas = getattr(sch, "lr_lambdas", None)
    base = getattr(sch, "base_lrs", None)
    if type(sch).__name__ == "LambdaLR" and lambdas and base:
        return [float(base[0]) * float(lambdas[0](i)) for i in range(steps)]
    state = sch.state_dict()
    lrs = [g["lr"] for g in opt.param_groups]
    curve = [float(opt.param_groups[0]["lr"])]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()"
            for _ in range(steps - 1):
                sch.step()
                curve.append(float(opt.param_groups[0]["lr"]))
    finally:
        sch.load_state_dict(state)
        for g, lr in zip(opt.param_groups, lrs, strict=True):
            g["lr"] = lr
    return curve


def _seq_len(recipe: Recipe) -> int | None:
    for key in ("seq_len", "context_len", "max_seq_len", "block_size", "seq"):
        v = recipe.config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def settings_from_recipe(recipe: Recipe, *, source: str,
                         horizon_steps: int | None = None) -> Settings:
    """Settings read from a built recipe: optimizer hyper-parameters, the lr schedule over
    ``horizon_steps`` (default: the recipe config's ``steps``, else 1000), precision, scaler,
    clip, batch, and the parameters decayed that have one dimension or fewer."""
    import torch

    opt = recipe.optimizer
    g0 = opt.param_groups[0]
    steps = horizon_steps or recipe.config.get("steps") or 1000
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 2:
        steps = 1000
    curve = _lr_curve(recipe, min(int(steps), 100_000))
    peak = max(curve)
    peak_at = next(i for i, v in enumerate(curve) if v >= 0.99 * peak)
    warm = 0 if peak <= 0 or curve[0] >= NO_WARMUP_RATIO * peak else peak_at
    decays = peak > 0 and curve[-1] < 0.9 * peak and len(curve) > 2
    params = [p for p in recipe.model.parameters() if p.requires_grad]
    dtypes: dict[str, int] = {}
    for p in params:
        name = str(p.dtype).removeprefix("torch.")
        dtypes[name] = dtypes.get(name, 0) + p.numel()
    decayed_1d = sum(1 for g in opt.param_groups if g.get("weight_decay", 0) > 0
                     for p in g["params"] if isinstance(p, torch.Tensor) and p.ndim <= 1)
    betas = g0.get("betas")
    bs = getattr(recipe.data, "batch_size", None)
    return Settings(
        source=source, num_params=sum(p.numel() for p in params) or None,
        optimizer=type(opt).__name__, lr=float(peak),
        weight_decay=float(g0.get("weight_decay", 0.0)), eps=g0.get("eps"),
        betas=(float(betas[0]), float(betas[1])) if betas else None,
        warmup_steps=warm, decays=decays, precision=recipe.precision,
        param_dtype=max(dtypes, key=lambda k: dtypes[k]) if dtypes else None,
        scaler=recipe.scaler is not None, max_grad_norm=recipe.max_grad_norm, clip_known=True,
        batch_size=bs if isinstance(bs, int) and bs > 0 else None,
        grad_accum=recipe.grad_accum, seq_len=_seq_len(recipe),
        decayed_1d_params=decayed_1d)

