"""Where a watcher's rows go: the run store and the live alerts, in the order of the steps.

Two kinds of rows are held back and handed over in batches:

* rows of the common CPU step (every value already a host float), kept as tuples and built
  into dicts ``drain_rows`` at a time, or once ``drain_s`` has passed: built, stored and fed
  to the alerts once per step, on caches the step's kernels left cold, that Python costs
  more than reading the values (measured by ``benchmarks/watch_overhead.py``);
* values that live on an accelerator, fetched with one transfer every ``fetch_every`` steps
  (the one host-device sync; the CUDA events of those steps are complete after it).

Anything recorded directly (:meth:`Recorder.record`) first drains the held CPU rows, so the
store's rows stay in step order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from trainmedic.live.clock import elapsed_s

__all__ = ["Recorder", "CpuRow", "put_step_time", "read_now"]

#: A held CPU step: (step, step_time_s, data_time_s, compute_time_s, lr, loss, grad_norm,
#: rss_mb, batch_size, tokens, gc_time_s, comm_time_s); None where a value is missing.
CpuRow = tuple[int, float, float, Any, Any, Any, Any, Any, Any, Any, float, Any]



def put_step_time(row: dict[str, float | None], step_time_s: float, batch_size: int | None,
                  tokens: int | None, flop_scales: Mapping[str, float] | None = None) -> None:
    """A host-timed step's ``step_time_s`` and the rates from it (samples, tokens per s;
    ``mfu`` / ``hfu`` from ``flop_scales``, FLOPs per step over the peak FLOP/s)."""
    row["step_time_s"] = step_time_s
    if step_time_s > 0:
        if batch_size is not None:
            row["samples_per_s"] = batch_size / step_time_s
        if tokens is not None:
            row["tokens_per_s"] = tokens / step_time_s
        for name, scale in (flop_scales or {}).items():
            row[name] = scale / step_time_s

class Recorder:
    """Rows of one watcher into its ``store`` and ``alerts`` (a ``LiveAlerts`` or None);
    ``check_fetched(step, row)`` sees each row of fetched device values (the NaN guard)."""

    def __init__(self, torch: Any, store: Any, alerts: Any, *, fetch_every: int,
                 drain_rows: int, drain_s: float, check_fetched: Any,
                 flop_scales: Mapping[str, float] | None = None) -> None:
        self._torch = torch
        self.store = store
        self.alerts = alerts
        self.fetch_every = fetch_every
        self._drain_rows = drain_rows
        self._drain_s = drain_s
        self._check_fetched = check_fetched
        self.rows: list[CpuRow] = []
        self.pending: list[tuple[int, dict[str, Any]]] = []
        #: Per metric (``mfu``, ``hfu``), FLOPs per step over the peak FLOP/s: the metric is
        #: this over the step time.
        self.flop_scales: Mapping[str, float] = flop_scales or {}
        #: The loss of the last fetched device row (the progress line's loss on a GPU).
        self.last_loss: float | None = None
        self._t_drained = time.perf_counter()

    # -- rows ---------------------------------------------------------------------------
    def record(self, s: int, row: Mapping[str, Any]) -> None:
        """Record one row now (after the held CPU rows, to keep the steps in order)."""
        if self.rows:
            self.drain()
        self._write(s, row)

    def record_event(self, s: int, kind: str, data: dict[str, Any]) -> None:
        """A non-numeric event, to the store and to the live alerts' detectors."""
        self.store.event(s, kind, data)
        if self.alerts is not None:
            from trainmedic.run.series import RunEvent

            self.alerts.add_event(RunEvent(s, kind, dict(data), self.store.rank))

    def hold(self, row: CpuRow, now: float) -> None:
        """Keep one CPU step's values; drain when enough rows or time have gone by."""
        rows = self.rows
        rows.append(row)
        if len(rows) >= self._drain_rows or now - self._t_drained >= self._drain_s:
            self.drain()

    def drain(self) -> None:
        """Build the held CPU rows (the same row a direct record would have) and record
        them."""
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        self._t_drained = time.perf_counter()
        write = self._write
        for (s, step_time_s, data_s, fwd, lr, loss, gn, rss, batch_size, tokens, gc_s,
             comm_s) in rows:
            row: dict[str, float | None] = {"data_time_s": data_s, "gc_time_s": gc_s,
                                            "rss_mb": rss}
            put_step_time(row, step_time_s, batch_size, tokens, self.flop_scales)
            if fwd is not None:
                row["compute_time_s"] = fwd
            if comm_s is not None:
                row["comm_time_s"] = comm_s
            if lr is not None:
                row["lr"] = lr
            if loss is not None:
                row["loss"] = loss
            if gn is not None:
                row["grad_norm"] = gn
            write(s, row)

    def _write(self, s: int, row: Mapping[str, Any]) -> None:
        self.store.log(s, row)
        if self.alerts is not None:
            self.alerts.feed(s, row)

    # -- device values ------------------------------------------------------------------
    def defers(self, value: Any) -> bool:
        """Hold a tensor for the batched fetch (an accelerator tensor, or ``fetch_every >
        1``) rather than reading it now (a CPU tensor: ``item()`` costs no sync)."""
        return bool(not value.is_cpu or self.fetch_every > 1)

    def put(self, host: dict[str, Any], device: dict[str, Any], name: str, value: Any) -> None:
        """One value into a step's host row (read now) or device row (fetched later)."""
        if type(value) is float:
            host[name] = value
        elif isinstance(value, self._torch.Tensor):
            if value.is_cpu and self.fetch_every == 1:
                host[name] = value.item()  # no device to wait for, no graph kept
            else:
                device[name] = value.detach().reshape(())
        else:
            host[name] = float(value)

    def log(self, s: int, metrics: Mapping[str, Any]) -> None:
        """Scalars the loop logs itself (``Watcher.log``): host values recorded now, device
        tensors held for the next batched fetch."""
        torch = self._torch
        host = {k: float(v) for k, v in metrics.items()
                if not isinstance(v, torch.Tensor) or not self.defers(v)}
        dev = {k: v.detach().reshape(()) for k, v in metrics.items()
               if isinstance(v, torch.Tensor) and self.defers(v)}
        if host:
            self.record(s, host)
        if dev:
            self.hold_device(s, dev)

    def hold_device(self, s: int, device: dict[str, Any]) -> None:
        """Keep step ``s``'s device values; fetch once ``fetch_every`` steps are held."""
        self.pending.append((s, device))
        if len(self.pending) >= self.fetch_every:
            self.fetch()

    def fetch(self) -> None:
        """Bring held device values to the host with one transfer and record them."""
        if not self.pending:
            return
        torch = self._torch
        pending, self.pending = self.pending, []
        tensors = [v for _, d in pending for v in d.values() if isinstance(v, torch.Tensor)]
        values: list[float] = []
        if tensors:
            dev = tensors[0].device
            flat = [v.to(dev, torch.float64) for v in tensors]
            values = torch.stack(flat).tolist()  # the one sync; events below are complete
        i = 0
        for s, d in pending:
            row: dict[str, float] = {}
            for name, v in d.items():
                if isinstance(v, torch.Tensor):
                    row[name] = values[i]
                    i += 1
                elif isinstance(v, list):  # CUDA event pairs
                    row[name] = elapsed_s(v)
            for name, v in d.items():
                if isinstance(v, tuple) and v and v[0] == "rate":
                    t = row.get("step_time_s")
                    if t:
                        row[name] = v[1] / t
            self._check_fetched(s, row)
            self.record(s, row)
            if "loss" in row:
                self.last_loss = row["loss"]

    def flush(self) -> None:
        """Drain and fetch everything held (the store commits it on its own schedule)."""
        self.drain()
        self.fetch()


def read_now(torch: Any, values: Mapping[str, Any]) -> dict[str, float]:
    """CPU tensors to floats with one ``tolist()`` per dtype, not one ``item()`` each (each
    torch call costs ~10 us inside a real loop; a layer-health step has hundreds of values)."""
    groups: dict[Any, list[str]] = {}
    for name, v in values.items():
        groups.setdefault(v.dtype, []).append(name)
    out: dict[str, float] = {}
    for names in groups.values():
        out.update(zip(names, torch.stack([values[n] for n in names]).tolist(), strict=True))
    return out
