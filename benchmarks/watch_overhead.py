"""What watching a training loop costs: trainmedic's watcher against the tools users reach for.

Usage (from the repository root)::

    .venv/bin/python benchmarks/watch_overhead.py                  # ~1-2 minutes
    .venv/bin/python benchmarks/watch_overhead.py --rounds 40 --json
    .venv/bin/python benchmarks/watch_overhead.py --clip 1.0       # loops that clip

The loop is the demo's: the 2-layer character transformer (d_model 64), batch 16 x 64
characters, AdamW, on CPU with one torch thread. Variants:

* ``plain``: no instrumentation (the baseline);
* ``watch``: ``trainmedic.watch`` with its defaults, ``w.step()`` called as the demo calls it
  (``batch_size``, ``tokens`` and a ``replay`` closure) (per-step telemetry, param norm and
  update ratio every 50 steps, the NaN guard in "skip" mode, live alerts every 100 steps);
* ``watch_no_guard``: the same with ``nan_policy="record"``: the guard's cost is the
  difference from ``watch``;
* ``watch_no_alerts``: defaults without live alerts (their thread's share is the difference);
* ``watch_rss_each_step``: defaults, the resident set read on the training thread at every
  step (``rss_interval_s=None``) instead of at most every ``rss_interval_s``;
* ``watch_layers50``: defaults plus per-layer health every 50 steps;
* ``detect_anomaly``: ``torch.autograd.detect_anomaly()`` around forward and backward;
* ``fwd_hooks``: a forward hook on every module reading abs-min/abs-max of its outputs to
  the host, the approach of HF transformers' ``DebugUnderflowOverflow``.

Variants run interleaved on ONE model (two instances of the same model differ by up to 2.5%
in step time here: memory placement): each round installs a variant's instrumentation, runs
``--steps-per-round`` (100) steps, and removes it, every variant in a shuffled order, so machine
noise hits all of them alike. The watcher's schedules continue across rounds (``start_step``),
but its live-alert window restarts each round, so the cost of one alert pass over a full
2000-step window is measured on its own and printed beside the table. The figure per variant is the
median over rounds of (its mean step time in the round / plain's in the same round) - 1, in
wall time (what a user pays, noise and GIL contention with the watcher's threads included)
and in the training thread's CPU time (``time.thread_time``: the work added on that thread,
blind to the VM's stalls, which make wall-time ratios here swing by +-2% between runs).

Two finer figures for the default watcher, less noisy than whole-step ratios:

* its own time (:func:`direct_cost_us`): the training thread's CPU time inside each of its
  entry points, less what the timer reads around a do-nothing function at the same places;
  and the CPU time of its threads (store writer, live alerts), which run beside
  the training thread;
* its added time by part of the step (:func:`net_cost_us`): steps with and without the
  watcher's hooks side by side (a coin per step), the training thread's CPU per part
  (forward, backward, optimizer step, ``w.step()``), difference of the medians. This also
  counts what the watcher changes around its own code, both ways: the hooks' dispatch, and
  the optimizer finding the gradients' Python objects already made and their memory already
  in cache by the grad-norm pass (tens of microseconds that the own-time figure charges to
  the watcher).

Inside a training loop each call the watcher makes runs on cold caches (the step's kernels
evicted them): ~3-10x its cost in a tight loop, and more when other processes share the
machine's cache. Bars (issue 3): watch <= 1 %, watch_layers50 <= 3 %, the guard unmeasurable.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import describe, one_line  # noqa: E402

VARIANTS = ("plain", "watch", "watch_no_guard", "watch_no_alerts", "watch_rss_each_step",
            "watch_layers50", "detect_anomaly", "fwd_hooks")


#: The loops the benchmark can train (``--loop``): the demo's transformer, and a model
#: written the way many users write one, outside this project: nn.TransformerEncoder layers
#: with a causal mask (issue 14 measured the watcher at +2.0% there, 46 ms steps).
LOOPS = ("demo", "encoder")
SEQ_LEN = {"demo": 64, "encoder": 64}


def EncoderLM(vocab: int, *, context_len: int) -> Any:  # noqa: N802 - a model factory
    """A 2-layer ``nn.TransformerEncoder`` language model (d_model 128, 4 heads, ff 512,
    dropout 0.1, pre-norm off: torch's defaults), causal, tied to no project code."""
    import torch
    from torch import nn

    class _LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, 128)
            self.pos = nn.Embedding(context_len, 128)
            layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(128, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(
                context_len), persistent=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            return self.head(self.enc(x, mask=self.mask[:t, :t], is_causal=True))

    return _LM()


class Trainer:
    """The one model, optimizer and batch stream that every variant trains in turn.

    One model for all variants, not one each: two instances of the same model differ by up
    to ~2.5% in step time on this CPU (measured A/A: memory placement), more than the bar.
    """

    def __init__(self, make_batch: Callable[[int], Any], vocab: int,
                 loop: str = "demo") -> None:
        import torch

        from trainmedic.demo.model import CharTransformer

        torch.manual_seed(0)
        self.make_batch = make_batch
        self.model = (CharTransformer(vocab, context_len=64) if loop == "demo"
                      else EncoderLM(vocab, context_len=SEQ_LEN[loop]))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)
        self.step_i = 0
        self.last_cpu_s = 0.0
        #: --clip: every loop clips the gradients to this norm (the watched ones through
        #: ``w.clip_grad_norm_``, the others through torch's ``clip_grad_norm_``).
        self.clip: float | None = None

    def clip_grads(self, watcher: Any) -> None:
        """Clip as the loop at hand would: through the watcher when there is one."""
        import torch

        if self.clip is None:
            return
        if watcher is not None:
            watcher.clip_grad_norm_(self.clip)
        else:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)

    def batch_loss(self, x: Any, y: Any) -> Any:
        """The loss of one batch: what the demo hands the NaN guard as ``replay=``."""
        import torch.nn.functional as F

        logits = self.model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def run(self, steps: int, *, watcher: Any = None,
            ctx: Callable[[], AbstractContextManager[Any]] = nullcontext) -> float:
        """Train ``steps`` steps; return the mean wall time per step in seconds (and keep the
        training thread's CPU time per step in ``last_cpu_s``)."""
        import torch.nn.functional as F

        c0 = time.thread_time()
        t0 = time.perf_counter()
        batches: Any = self.batches(steps)
        if watcher is not None:  # as the demo does: the batches come through the watcher
            batches = watcher.wrap_loader(batches)
        for x, y in batches:
            self.opt.zero_grad(set_to_none=True)
            with ctx():
                logits = self.model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                loss.backward()
            self.clip_grads(watcher)
            self.opt.step()
            if watcher is not None:
                watcher.step(loss, batch_size=x.shape[0], tokens=x.numel(),
                             replay=functools.partial(self.batch_loss, x, y))
            self.step_i += 1
        wall = (time.perf_counter() - t0) / steps
        self.last_cpu_s = (time.thread_time() - c0) / steps
        return wall

    def batches(self, steps: int) -> Any:
        """The next ``steps`` batches, as a generator (what a data loader hands the loop)."""
        for _ in range(steps):
            yield self.make_batch(self.step_i)

    def step_parts(self, watcher: Any = None,
                   source: Any = None) -> tuple[int, int, int, int, int]:
        """Train one step on the next batch of ``source`` (an iterator; by default a fresh
        batch); return the training thread's CPU time, in nanoseconds, of each part of it:
        taking the batch, zero_grad + forward + loss, backward, ``optimizer.step()`` (with
        any hooks), ``w.step()``."""
        import torch.nn.functional as F

        clock = time.thread_time_ns
        tb = clock()
        x, y = next(source) if source is not None else self.make_batch(self.step_i)
        replay = functools.partial(self.batch_loss, x, y)
        t0 = clock()
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        t1 = clock()
        loss.backward()
        t2 = clock()
        self.clip_grads(watcher)
        self.opt.step()
        t3 = clock()
        if watcher is not None:
            watcher.step(loss, batch_size=x.shape[0], tokens=x.numel(), replay=replay)
        t4 = clock()
        self.step_i += 1
        return t0 - tb, t1 - t0, t2 - t1, t3 - t2, t4 - t3

def run_round(name: str, trainer: Trainer, steps: int, run_root: Path) -> float:
    """Install ``name``'s instrumentation (untimed), train ``steps`` steps (timed), remove it."""
    import torch

    from trainmedic.live import watch

    if name.startswith("watch"):
        kwargs: dict[str, Any] = {}
        if name == "watch_no_guard":
            kwargs["nan_policy"] = "record"
        if name == "watch_no_alerts":
            kwargs["alert_every"] = None
        if name == "watch_rss_each_step":
            kwargs["rss_interval_s"] = None
        if name == "watch_layers50":
            kwargs["layer_every"] = 50
        # start_step continues the schedules (param norm, layer health, alerts) across rounds.
        with watch(trainer.model, trainer.opt, run_dir=run_root / name,
                   start_step=trainer.step_i, **kwargs) as w:
            return trainer.run(steps, watcher=w)
    if name == "detect_anomaly":
        return trainer.run(steps, ctx=lambda: torch.autograd.detect_anomaly(check_nan=True))
    if name == "fwd_hooks":
        sink: list[float] = []

        def hook(module: Any, args: Any, out: Any) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                a = out.detach().abs()
                sink.append(float(a.min()))
                sink.append(float(a.max()))
                if len(sink) > 10_000:
                    sink.clear()

        handles = [m.register_forward_hook(hook) for m in trainer.model.modules()]
        try:
            return trainer.run(steps)
        finally:
            for h in handles:
                h.remove()
    return trainer.run(steps)


def _thread_cpu_s(prefix: str) -> float:
    """CPU seconds used so far by the live threads whose name starts with ``prefix``."""
    import threading

    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith(prefix) and t.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, AttributeError):  # a thread that just ended; not Linux
                pass
    return total


def direct_cost_us(trainer: Trainer, steps: int, run_root: Path,
                   **options: Any) -> dict[str, float]:
    """The default watcher's own CPU time on the training thread, per step, by entry point.

    Every place the watcher runs on the training thread (the forward pre/post hooks, the
    optimizer pre/post-step hooks, ``w.step()``) is wrapped with ``time.thread_time()``; the
    loader wrapper is not (its timed call contains the real batch's making): its share is
    the "batch" part of :func:`net_cost_us`.
    What the timer pair itself reads is measured in the same loop, at the same places,
    around functions that do nothing (hooks and a ``step()`` of a stand-in), and subtracted:
    inside a training loop the timer's syscall runs on cold caches and reads several
    microseconds, ~5x what it reads in a tight loop. This is the added work without the
    machine's noise; what it leaves out (cache effects, the hooks' dispatch, the watcher's
    threads contending for the GIL) and what it over-counts (work the watcher moves rather
    than adds: it creates the gradients' Python objects and reads them first, so the
    optimizer then does less) are in the per-part A/B of :func:`net_cost_us`. Also returned:
    the CPU time of the watcher's own threads (store writer, live alerts) per
    step, which runs beside the training thread.
    """
    from trainmedic.live import clock, watch
    from trainmedic.live import watcher as watcher_mod

    spent: dict[str, float] = {}
    calls: dict[str, int] = {}

    def timed(cls: Any, name: str, label: str) -> Callable[[], None]:
        orig = getattr(cls, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return orig(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t0
                calls[label] = calls.get(label, 0) + 1
        setattr(cls, name, wrapper)
        return lambda: setattr(cls, name, orig)

    class _Noop:
        """No-op stand-ins for the watcher's entry points, timed the same way."""

        def fwd_pre(self, module: Any, args: Any) -> None:
            return None

        def fwd_post(self, module: Any, args: Any, out: Any) -> None:
            return None

        def opt_hook(self, opt: Any, args: Any, kwargs: Any) -> None:
            return None

        def step(self, loss: Any, **kwargs: Any) -> None:
            return None

        def wrap_loader(self, batches: Any) -> Any:
            return batches

        def clip_grad_norm_(self, max_norm: float) -> Any:
            import torch

            return torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), max_norm)

    labels = {"fwd_pre": "forward hooks", "fwd_post": "forward hooks",
              "opt_hook": "optimizer hooks", "step": "w.step()"}
    undo = [timed(_Noop, name, label) for name, label in labels.items()]
    noop = _Noop()
    handles = [trainer.model.register_forward_pre_hook(noop.fwd_pre),
               trainer.model.register_forward_hook(noop.fwd_post),
               trainer.opt.register_step_pre_hook(noop.opt_hook),
               trainer.opt.register_step_post_hook(noop.opt_hook)]
    try:
        trainer.run(steps, watcher=noop)
    finally:
        for h in handles:
            h.remove()
        for u in undo:
            u()
    per_call_s = {k: spent[k] / calls[k] for k in spent}
    spent.clear()
    calls.clear()

    undo = [timed(clock.ForwardClock, "_pre", "forward hooks"),
            timed(clock.ForwardClock, "_post", "forward hooks"),
            timed(watcher_mod.Watcher, "_on_pre_optimizer_step", "optimizer hooks"),
            timed(watcher_mod.Watcher, "_on_post_optimizer_step", "optimizer hooks"),
            timed(watcher_mod.Watcher, "step", "w.step()")]
    try:
        with watch(trainer.model, trainer.opt, run_dir=run_root / "direct",
                   start_step=trainer.step_i, **options) as w:
            threads0 = _thread_cpu_s("trainmedic")
            trainer.run(steps, watcher=w)
            threads_s = _thread_cpu_s("trainmedic") - threads0
    finally:
        for u in undo:
            u()
    out = {k: 1e6 * max(0.0, v - calls[k] * per_call_s[k]) / steps for k, v in spent.items()}
    out["total"] = sum(out.values())
    out["timer_us_per_call"] = 1e6 * statistics.mean(per_call_s.values())
    out["threads"] = 1e6 * threads_s / steps
    return out


def net_cost_us(trainer: Trainer, steps: int, run_root: Path,
                **options: Any) -> dict[str, Any]:
    """The default watcher's added CPU time on the training thread, per part of the step,
    from steps with and without it side by side: one watcher is made, its hooks are taken
    off, and before each step a coin decides whether they are put back (and ``w.step()``
    called) for that step; hooks go on and off between steps, outside the timed parts. The
    figure per part is the difference of the median CPU time per step of that part with
    and without the watcher. Unlike :func:`direct_cost_us` this counts what the watcher
    changes in the work around it (the hooks' dispatch; the optimizer finding the
    gradients' Python objects made and their memory in cache); pairing neighbouring steps
    keeps the machine's drift out. Its threads run through both kinds of step, so what
    they cost the training thread is only in the interleaved whole-run ratios."""
    from trainmedic.live import watch

    parts = ("batch", "forward", "backward", "optimizer", "w.step()")
    touched = ("batch", "forward", "optimizer", "w.step()")  # the parts it runs in
    rng = random.Random(1)
    times: dict[bool, list[tuple[int, ...]]] = {True: [], False: []}
    model, opt = trainer.model, trainer.opt
    with watch(model, opt, run_dir=run_root / "net", start_step=trainer.step_i,
               **options) as w:
        # One stream of batches, taken directly on the plain steps and through the watcher's
        # loader wrapper on the watched ones (as the demo's loop does).
        raw = trainer.batches(steps + 20)
        wrapped = iter(w.wrap_loader(raw))
        clock = w._forward  # after wrap_loader: None unless the forward clock is on
        model_hooks = [] if clock is None else [(model.register_forward_pre_hook, clock._pre)]
        if clock is not None and clock.timed:
            model_hooks.append((model.register_forward_hook, clock._post))
        for h in (*w._hooks, *(clock._handles if clock is not None else ())):
            h.remove()  # detached: put back on the watched steps
        for i in range(steps + 20):
            on = rng.random() < 0.5
            if on:
                handles = [opt.register_step_pre_hook(w._on_pre_optimizer_step),
                           opt.register_step_post_hook(w._on_post_optimizer_step),
                           *(register(fn) for register, fn in model_hooks)]
            got = trainer.step_parts(w if on else None, wrapped if on else raw)
            if on:
                for h in handles:
                    h.remove()
            if i >= 20:  # warm-up
                times[on].append(got)
    added = {p: (statistics.median(t[i] for t in times[True])
                 - statistics.median(t[i] for t in times[False])) / 1e3
             for i, p in enumerate(parts)}
    # The spread: the same figure over each quarter of the run.
    quarters = []
    for k in range(4):
        sub = {on: v[k * len(v) // 4:(k + 1) * len(v) // 4] for on, v in times.items()}
        quarters.append(sum(
            (statistics.median(t[i] for t in sub[True])
             - statistics.median(t[i] for t in sub[False])) / 1e3
            for i, p in enumerate(parts) if p in touched))
    return {"steps": {"with": len(times[True]), "without": len(times[False])},
            "plain_us": {p: statistics.median(t[i] for t in times[False]) / 1e3
                         for i, p in enumerate(parts)},
            "added_us": added,
            "added_touched_us": sum(added[p] for p in touched),
            "added_touched_quarters_us": quarters}

def alert_pass_ms(window: int = 2000) -> float:
    """Median time of one live-alert pass over a full window of watcher-like rows."""
    import numpy as np

    from trainmedic.live.alerts import LiveAlerts

    rng = np.random.default_rng(0)
    alerts = LiveAlerts(every=100, window=window, max_busy_fraction=None)
    times = []
    for s in range(3 * window):
        alerts.feed(s, {"loss": 3 * np.exp(-s / 800) + 1 + 0.02 * rng.standard_normal(),
                        "lr": 1e-3, "grad_norm": 1 + 0.1 * rng.standard_normal(),
                        "step_time_s": 0.013, "data_time_s": 1e-5, "compute_time_s": 0.004,
                        "rss_mb": 300.0, "samples_per_s": 1200.0})
        before = alerts.passes
        alerts.after_step(s)
        if s >= window and (s + 1) % 100 == 0:
            alerts.wait_idle(30)
            if alerts.passes > before and alerts.last_pass_s is not None:
                times.append(alerts.last_pass_s)
    alerts.close()
    return 1000 * statistics.median(times)


def _with_loop(argv: list[str], loop: str) -> list[str]:
    """``argv`` with its ``--loop`` option replaced by ``--loop LOOP``."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--loop":
            skip = True
        elif not a.startswith("--loop="):
            out.append(a)
    return [*out, "--loop", loop]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps-per-round", type=int, default=100)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--net-steps", type=int, default=1200,
                    help="steps of the per-part A/B, half with the watcher; 0: skip it")
    ap.add_argument("--direct-steps", type=int, default=300,
                    help="steps of the own-time measurement (and of its calibration)")
    ap.add_argument("--batch-size", type=int, default=16,
                    help="sequences per step (the demo's is 16); larger batches show that the "
                         "watcher's cost per step is fixed, not proportional to compute")
    ap.add_argument("--nan-policy", default=None, choices=("skip", "raise", "record"),
                    help="the watcher's nan_policy for the own-time and per-part figures "
                         "(default: the watcher's default, 'skip' on CPU)")
    ap.add_argument("--clip", type=float, default=None, metavar="MAX_NORM",
                    help="every loop clips its gradients to this norm: the plain ones with "
                         "torch.nn.utils.clip_grad_norm_, the watched ones with "
                         "w.clip_grad_norm_ (which records the pre-clip norm it takes, so the "
                         "watcher does not read the gradients again)")
    ap.add_argument("--loop", default="demo", choices=LOOPS + ("all",),
                    help="the training loop measured: the demo's transformer, a "
                         "2-layer nn.TransformerEncoder LM (seq 64), or each in turn")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.loop == "all":
        raw = list(sys.argv[1:] if argv is None else argv)
        return max(main(_with_loop(raw, loop)) for loop in LOOPS)

    import torch

    from trainmedic.demo.corpus import load_corpus

    torch.set_num_threads(1)
    text = load_corpus()
    vocab = sorted(set(text))
    lut = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([lut[c] for c in text[:300_000]])
    gen = torch.Generator().manual_seed(0)
    seq = SEQ_LEN[args.loop]
    starts = torch.randint(0, len(data) - seq - 1, (4096, args.batch_size), generator=gen)

    def make_batch(i: int) -> tuple[Any, Any]:
        s = starts[i % len(starts)]
        return (torch.stack([data[j:j + seq] for j in s]),
                torch.stack([data[j + 1:j + seq + 1] for j in s]))

    names = [v for v in args.variants.split(",") if v]
    if "plain" not in names:
        names.insert(0, "plain")
    rng = random.Random(0)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    cpu_round: dict[str, list[float]] = {n: [] for n in names}
    trainer = Trainer(make_batch, len(vocab), args.loop)
    trainer.clip = args.clip
    with tempfile.TemporaryDirectory() as tmp:
        for n in (names if args.rounds > 0 else ["plain", "watch"]):  # warm-up: allocator,
            run_round(n, trainer, 20, Path(tmp))                       # first calls, imports
        for r in range(args.rounds):
            order = names[:]
            rng.shuffle(order)
            for n in order:
                per_round[n].append(run_round(n, trainer, args.steps_per_round, Path(tmp)))
                cpu_round[n].append(trainer.last_cpu_s)
            if not args.json:
                print(f"\rround {r + 1}/{args.rounds}", end="", file=sys.stderr, flush=True)
        options = {} if args.nan_policy is None else {"nan_policy": args.nan_policy}
        direct = direct_cost_us(trainer, args.direct_steps, Path(tmp), **options)
        trainer.run(args.direct_steps)
        plain_cpu_us = 1e6 * trainer.last_cpu_s
        net = (net_cost_us(trainer, args.net_steps, Path(tmp), **options)
               if args.net_steps > 0 else None)
    if not args.json:
        print(file=sys.stderr)
    pass_ms = alert_pass_ms()
    base = per_round["plain"]
    result: dict[str, Any] = {"machine": describe(), "loop": args.loop, "rounds": args.rounds,
                              "steps_per_round": args.steps_per_round, "clip": args.clip,
                              "variants": {},
                              "alert_pass_ms": pass_ms, "direct_us_per_step": direct,
                              "plain_thread_cpu_us_per_step": plain_cpu_us,
                              "net_us_per_step": net}
    for n in (names if args.rounds > 0 else []):
        ratios = [a / b - 1.0 for a, b in zip(per_round[n], base, strict=True)]
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else [min(ratios),
                                                                         0, max(ratios)]
        cpu_ratios = [a / b - 1.0 for a, b in zip(cpu_round[n], cpu_round["plain"],
                                                   strict=True)]
        result["variants"][n] = {
            "median_step_ms": 1000 * statistics.median(per_round[n]),
            "overhead_pct": 100 * statistics.median(ratios),
            # the measure: the mean of the paired (same-round) ratios
            "overhead_mean_pct": 100 * statistics.fmean(ratios),
            "overhead_iqr_pct": [100 * q[0], 100 * q[-1]],
            "thread_cpu_overhead_pct": 100 * statistics.median(cpu_ratios),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(one_line())
    clipping = "" if args.clip is None else f", gradients clipped to {args.clip:g}"
    model = ("demo transformer" if args.loop == "demo"
             else "2-layer nn.TransformerEncoder LM")
    print(f"{model} on CPU, batch {args.batch_size} x {seq}, 1 torch thread{clipping}; "
          f"{args.rounds} rounds x "
          f"{args.steps_per_round} steps per variant, interleaved")
    step_us = plain_cpu_us
    print(f"plain step: {step_us / 1000:.2f} ms of training-thread CPU")
    print(f"live alerts: one pass over a 2000-step window takes {pass_ms:.1f} ms, every 100 "
          f"steps: {100 * pass_ms / (100 * step_us / 1000):.2f}% of step time if it held the "
          f"GIL throughout (it runs on its own thread)")
    who = ("default watcher" if args.nan_policy is None
           else f"watcher (nan_policy={args.nan_policy!r})")
    total_us = direct["total"]
    parts = ("forward hooks", "optimizer hooks", "w.step()")
    print(f"{who}, its own CPU time on the training thread per step: {total_us:.0f} us "
          f"= {100 * total_us / step_us:.2f}% of a plain step ("
          + ", ".join(f"{k} {direct.get(k, 0.0):.0f} us" for k in parts)
          + f"; timer read {direct['timer_us_per_call']:.1f} us per call in the loop, "
            f"subtracted); its threads (store, alerts): "
            f"{direct['threads']:.0f} us of CPU per step beside it")
    if net is not None:
        added = net["added_us"]
        q = net["added_touched_quarters_us"]
        print(f"{who}, added training-thread CPU per step, A/B by part over "
              f"{net['steps']['with']} steps with it and {net['steps']['without']} without, "
              f"side by side (difference of medians): "
              + ", ".join(f"{k} {v:+.0f} us" for k, v in added.items())
              + f"; the parts it runs in (batch, forward, optimizer, w.step) "
                f"{net['added_touched_us']:+.0f} us = "
                f"{100 * net['added_touched_us'] / step_us:+.2f}% (quarters of the run: "
              + ", ".join(f"{v:+.0f}" for v in q) + " us)")
    if args.rounds <= 0:
        return 0
    print(f"{'variant':<16}{'step (ms)':>10}{'added (wall)':>14}{'mean':>8}{'IQR of added':>20}"
          f"{'added (thread CPU)':>20}")
    for n, v in result["variants"].items():
        lo, hi = v["overhead_iqr_pct"]
        print(f"{n:<16}{v['median_step_ms']:>10.2f}{v['overhead_pct']:>13.1f}%"
              f"{v['overhead_mean_pct']:>7.1f}%"
              f"{f'[{lo:+.1f}%, {hi:+.1f}%]':>20}{v['thread_cpu_overhead_pct']:>19.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
