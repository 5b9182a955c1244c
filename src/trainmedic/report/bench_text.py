"""The bench results as text lines for a terminal: the machine first, then every figure with
whether it was measured or estimated. Pure: returns lines; the CLI prints them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmedic.numbers import fmt_size

if TYPE_CHECKING:
    from trainmedic.bench.data import DataBench
    from trainmedic.bench.matmul import MatmulSweep
    from trainmedic.bench.storage import StorageResult

__all__ = ["matmul_lines", "storage_lines", "data_lines", "format_flops", "format_rate"]


def format_flops(value: float) -> str:
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.3g} FLOP/s"


def format_rate(bytes_per_s: float) -> str:
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.2f} {unit}"
    return f"{bytes_per_s:.0f} B/s"



def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"



def matmul_lines(s: MatmulSweep) -> list[str]:
    out: list[str] = []
    out.append(s.machine.one_line())
    where = f"{s.threads} threads" if s.threads is not None else (
        f"TF32 {'on' if s.tf32 else 'off'}" if s.tf32 is not None else "CUDA")
    out.append(f"matmul {s.dtype} on {s.device} ({where}): {len(s.per_shape)} shapes, "
               f"{s.iterations} timed + {s.warmup} warm-up iterations each, "
               f"{fmt_size(s.flush_bytes)} cache flush between iterations, "
               f"{s.elapsed_s:.1f} s")
    out.append(f"  {'m x n x k':>20}  {'median':>14}  {'best':>14}  {'mean':>14}   (measured)")
    for r in s.per_shape:
        shape = "x".join(str(v) for v in r.shape)
        mark = "  <- best median" if r.shape == s.best_shape else ""
        figures = (r.median_flops_per_s, r.best_flops_per_s, r.mean_flops_per_s)
        out.append(f"  {shape:>20}" + "".join(f"  {format_flops(f):>14}" for f in figures)
                   + mark)
    shape = "x".join(str(v) for v in s.best_shape)
    out.append(f"achievable (MAMF, highest per-shape median), measured: "
               f"{format_flops(s.peak_flops_per_s)} at {shape} (m x n x k)")
    out.append(f"fastest single iteration, measured: {format_flops(s.best_single_flops_per_s)}; "
               f"geomean of the per-shape means, measured: {format_flops(s.geomean_flops_per_s)}")
    return out


def storage_lines(r: StorageResult) -> list[str]:
    out: list[str] = []
    out.append(r.machine.one_line())
    out.append(f"storage {r.path}: {fmt_size(r.bytes_written)} file, {r.small_files} small files")
    out.append(f"  sequential write + fsync   {format_rate(r.write_bytes_per_s):>12}   measured "
               f"({r.write_s:.2f} s)")
    warm = format_rate(r.warm_read_bytes_per_s)
    out.append(f"  read, warm (page cache)    {warm:>12}   measured")
    cold = {True: "measured, eviction verified", False: "measured, NOT cold: pages stayed "
            "cached", None: "measured, eviction not checked"}[r.cold_verified]
    out.append(f"  read, cold                 {format_rate(r.cold_read_bytes_per_s):>12}   {cold}")
    if r.small_files_per_s is not None:
        out.append(f"  small files (create+fsync) {r.small_files_per_s:>8.0f} /s   measured")
    for c in r.checkpoints:
        out.append(f"  checkpoint of {c.checkpoint_bytes / 1e9:g} GB: "
                   f"{_duration(c.write_time_s)} to write   estimated (size / measured write "
                   "rate, one writer)")
    for note in r.notes:
        out.append(f"  note: {note}")
    return out


def data_lines(d: DataBench) -> list[str]:
    out: list[str] = []
    out.append(d.machine.one_line())
    out.append(f"data {d.recipe}: {d.kind}, {len(d.rows)} setting(s); rates exclude the first "
               "batch (start-up, shown apart)")
    out.append(f"  {'workers':>7} {'pin':>5} {'prefetch':>8} {'batches':>7} "
               f"{'samples/s':>11} {'batches/s':>10} {'start-up':>9}   (all measured)")
    for r in d.rows:
        def show(v: object) -> str:
            return "-" if v is None else ("on" if v is True else "off" if v is False
                                          else str(v))
        mark = ("  <- fastest" if r is d.best else "") + ("  (recipe's)" if r.recipe_setting
                                                         else "")
        out.append(f"  {show(r.num_workers):>7} {show(r.pin_memory):>5} "
                   f"{show(r.prefetch_factor):>8} {r.batches:>7} {r.samples_per_s:>11.1f} "
                   f"{r.batches_per_s:>10.1f} {r.startup_s:>8.3f}s{mark}")
    for note in d.notes:
        out.append(f"  note: {note}")
    return out
