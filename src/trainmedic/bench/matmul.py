"""Maximum achievable matmul FLOP/s (MAMF): what a dense GEMM really reaches on this device.

Semantics follow Stas Bekman's mamf-finder (ml-engineering, compute/accelerator/benchmarks,
benchmark version 2): for each (m, n, k) shape, ``C = A @ B`` with A (m, k), B stored (n, k)
and transposed, written into a preallocated C; ``warmup`` untimed iterations then
``iterations`` timed ones, each timed alone; before every iteration a buffer larger than the
last-level cache is zeroed (so A and B come from memory, not cache) and C is refilled with
random values (so the output is really written). Per shape the median, best (fastest
iteration) and mean FLOP/s are kept; the sweep's achievable figure is the **highest per-shape
median** (mamf-finder's "median" headline), and the shape it came from. FLOPs of one
(m, k) x (k, n) matmul are ``2 * m * n * k`` (one multiply and one add per term). On CUDA,
mamf-finder first warms the device for 30 s (a cold GPU boosts higher on the first shape
than on later ones); ``device_warmup_s`` does the same.

Timing: ``time.perf_counter`` around the call on CPU (the CPU kernel is synchronous);
``torch.cuda.Event`` pairs on CUDA, read after one ``synchronize`` at the end.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainmedic.bench.machine import Machine, describe_machine
from trainmedic.errors import ConfigError

__all__ = ["DTYPES", "ShapeResult", "MatmulSweep", "sweep_matmul", "matmul_flops",
           "shape_result", "shape_range", "grid_shapes", "default_shapes",
           "default_iterations", "requested_shapes"]

logger = logging.getLogger(__name__)

#: dtypes a sweep accepts (torch names).
DTYPES = ("float32", "bfloat16", "float16")

Shape = tuple[int, int, int]

#: mamf-finder zeroes 256 MiB between iterations on accelerators: more than any current GPU's
#: L2 / AMD's Infinity Cache (ml-engineering, compute/accelerator#caches).
CUDA_FLUSH_BYTES = 256 * 2**20
_CPU_FLUSH_FALLBACK_BYTES = 64 * 2**20

#: The clock a CPU iteration is timed with; a module attribute so a test can replace it.
_clock: Callable[[], float] = time.perf_counter


def matmul_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of one (m, k) x (k, n) matmul: ``2 * m * n * k``."""
    return 2 * m * n * k


@dataclass(kw_only=True, frozen=True)
class ShapeResult:
    """The figures of one shape, all measured."""

    shape: Shape
    """(m, n, k): A is (m, k), B is (k, n), C is (m, n)."""
    flops: int
    """FLOPs of one matmul of this shape (``2 * m * n * k``)."""
    iterations: int
    """Timed iterations the figures come from."""
    median_flops_per_s: float
    """FLOPs over the median iteration time: the shape's achievable figure."""
    best_flops_per_s: float
    """FLOPs over the fastest iteration."""
    mean_flops_per_s: float
    """FLOPs over the mean iteration time."""
    median_time_s: float
    """Median iteration time, seconds."""


def shape_result(shape: Shape, times_s: Sequence[float]) -> ShapeResult:
    """Per-shape figures from the timed iterations (seconds each); pure."""
    if not times_s or any(not (t > 0 and math.isfinite(t)) for t in times_s):
        raise ConfigError(f"times_s: got {list(times_s)[:5]}, expected one or more finite "
                          "positive iteration times; time at least one iteration")
    flops = matmul_flops(*shape)
    median = statistics.median(times_s)
    return ShapeResult(shape=shape, flops=flops, iterations=len(times_s),
                       median_flops_per_s=flops / median,
                       best_flops_per_s=flops / min(times_s),
                       mean_flops_per_s=flops / statistics.fmean(times_s),
                       median_time_s=median)


@dataclass(kw_only=True, frozen=True)
class MatmulSweep:
    """A matmul sweep: the achievable figure (measured), where it came from, and each shape."""

    device: str
    """``cpu`` or ``cuda[:N]``."""
    dtype: str
    """One of ``DTYPES``."""
    peak_flops_per_s: float
    """The achievable figure: the highest per-shape median FLOP/s (measured)."""
    best_shape: Shape
    """(m, n, k) of the shape with that median."""
    best_single_flops_per_s: float
    """The fastest single iteration over all shapes (measured; optimistic, not the MAMF)."""
    geomean_flops_per_s: float
    """Geometric mean of the per-shape mean FLOP/s (mamf-finder's geomean line)."""
    per_shape: tuple[ShapeResult, ...]
    """Every shape, in the order run."""
    iterations: int
    """Timed iterations per shape."""
    warmup: int
    """Untimed iterations per shape before them."""
    threads: int | None
    """torch intra-op threads during a CPU sweep (None on CUDA)."""
    tf32: bool | None
    """float32 on CUDA: whether TF32 tensor cores were allowed (None elsewhere)."""
    flush_bytes: int
    """Bytes zeroed before each iteration to evict A and B from the caches."""
    device_warmup_s: float
    """Seconds the device ran the first shape before the sweep."""
    elapsed_s: float
    """Wall time of the whole sweep."""
    machine: Machine
    """Where it ran."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; ``basis`` says every figure is measured."""
        d = asdict(self)
        d["best_shape"] = list(self.best_shape)
        d["per_shape"] = [{**asdict(r), "shape": list(r.shape)} for r in self.per_shape]
        d["machine"] = self.machine.to_dict()
        d["basis"] = "measured"
        return d


def shape_range(start: int, stop: int, step: int, *, field: str = "range") -> tuple[int, ...]:
    """mamf-finder's ``--m_range START STOP STEP``: ``range(start, stop, step)`` with a start
    of 0 moved to ``step`` (a dimension cannot be 0)."""
    if step <= 0 or start < 0 or stop <= 0:
        raise ConfigError(f"{field}: got START={start} STOP={stop} STEP={step}, expected "
                          "START >= 0, STOP > 0 and STEP > 0 (e.g. 0 4096 512)")
    values = tuple(range(start or step, stop, step))
    if not values:
        raise ConfigError(f"{field}: START={start} STOP={stop} STEP={step} gives no size; "
                          "STOP must exceed the first size (STOP is excluded)")
    return values


def requested_shapes(values: dict[str, str | None],
                     ranges: dict[str, tuple[int, int, int] | None]) -> tuple[Shape, ...] | None:
    """The (m, n, k) grid a user asked for: per dimension ``values`` ("1024,2048") or
    ``ranges`` ((START, STOP, STEP)), keyed ``m``, ``n``, ``k``; None when none was given.
    Half a request (one dimension given, another not) raises ``ConfigError``."""
    dims: list[tuple[int, ...] | None] = []
    for name in ("m", "n", "k"):
        text, rng = values.get(name), ranges.get(name)
        if text is not None and rng is not None:
            raise ConfigError(f"--{name}: give --{name} or --{name}-range, not both")
        if rng is not None:
            dims.append(shape_range(*rng, field=f"--{name}-range"))
        elif text is not None:
            try:
                sizes = tuple(int(v) for v in text.split(",") if v.strip())
            except ValueError:
                sizes = ()
            if not sizes or min(sizes) < 1:
                raise ConfigError(f"--{name}: got {text!r}, expected sizes >= 1 separated by "
                                  "commas (e.g. 1024,2048)")
            dims.append(sizes)
        else:
            dims.append(None)
    given = [d for d in dims if d is not None]
    if not given:
        return None
    if len(given) < 3:
        raise ConfigError("--m/--n/--k: give all three dimensions (values or ranges) or none")
    return grid_shapes(*given)


def grid_shapes(m: Sequence[int], n: Sequence[int], k: Sequence[int]) -> tuple[Shape, ...]:
    """Every (m, n, k) of the three lists, m outermost (mamf-finder's loop order)."""
    return tuple((a, b, c) for a in m for b in n for c in k)


def default_shapes(device: str, *, quick: bool = False) -> tuple[Shape, ...]:
    """The shapes swept when none are given.

    CPU: square 256..1024 plus rectangular ones, a few seconds on 2 cores in float32 (quick:
    three squares). CUDA: squares 2048..16384 and the rectangular shapes mamf-finder's quick
    run favours (n = k = 4096, m up to 16384); quick: four of them.
    """
    if device == "cpu":
        if quick:
            return ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024))
        squares = tuple((s, s, s) for s in (256, 512, 768, 1024))
        return squares + ((1024, 512, 1024), (512, 1024, 1024), (1024, 1024, 512),
                          (1024, 256, 1024))
    if quick:
        return ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 4096),
                (16384, 4096, 4096))
    squares = tuple((s, s, s) for s in range(2048, 16385, 2048))
    return squares + tuple((m, 4096, 4096) for m in (2048, 6144, 10240, 14336, 16384))


def default_iterations(device: str, *, quick: bool = False) -> tuple[int, int]:
    """(timed, warm-up) iterations per shape: mamf-finder's 100 / 50 on a GPU, 10 / 3 on a
    CPU (whose iterations are ~1000x slower); quick: 20 / 10 and 5 / 2."""
    if device == "cpu":
        return (5, 2) if quick else (10, 3)
    return (20, 10) if quick else (100, 50)


def _cpu_flush_bytes() -> int:
    """Twice the largest CPU cache sysfs reports (so nothing of A or B survives a zeroing),
    else 64 MiB."""
    largest = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * mult)
    return 2 * largest if largest else _CPU_FLUSH_FALLBACK_BYTES


def _check(device: str, dtype: str, shapes: Sequence[Shape], iterations: int,
           warmup: int, threads: int | None, device_warmup_s: float | None) -> None:
    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:")
                                                      and device[5:].isdigit())):
        raise ConfigError(f"device: got {device!r}, expected 'cpu', 'cuda' or 'cuda:N'")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype: got {dtype!r}, expected one of {', '.join(DTYPES)}")
    if not shapes:
        raise ConfigError("shapes: got none, expected at least one (m, n, k)")
    for s in shapes:
        if (len(s) != 3 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                               for v in s)):
            raise ConfigError(f"shapes: got {s!r}, expected (m, n, k) of positive integers")
    for name, value, low in (("iterations", iterations, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}: got {value!r}, expected an integer >= {low}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ConfigError(f"threads: got {threads!r}, expected an integer >= 1 or None")
    if device_warmup_s is not None and not (0 <= device_warmup_s < math.inf):
        raise ConfigError(f"device_warmup_s: got {device_warmup_s!r}, expected seconds >= 0")


@contextmanager
def _settings(torch: Any, device: str, threads: int | None, tf32: bool) -> Any:
    """Set torch's CPU threads / CUDA TF32 for the sweep, and put them back after."""
    old_threads = torch.get_num_threads()
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        if device == "cpu" and threads is not None:
            torch.set_num_threads(threads)
        if device != "cpu":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.backends.cuda.matmul.allow_tf32 = old_tf32


def _time_shape(torch: Any, shape: Shape, *, device: str, dtype: Any, iterations: int,
                warmup: int, flush: Any) -> list[float]:
    """Seconds of each timed iteration of one shape (warm-up iterations dropped)."""
    m, n, k = shape
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(n, k, device=device).to(dtype).t()  # mamf-finder's (n, k)^T layout
    c = torch.empty(m, n, device=device, dtype=dtype)
    c_rand = torch.randn(m, n, device=device).to(dtype)
    total = warmup + iterations
    cuda = device != "cpu"
    with torch.no_grad():
        if cuda:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
            for i in range(total):
                flush.zero_()
                c.copy_(c_rand)
                starts[i].record()
                torch.mm(a, b, out=c)
                ends[i].record()
            torch.cuda.synchronize(device)
            # elapsed_time is in milliseconds
            times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
        else:
            times = []
            for _ in range(total):
                flush.zero_()
                c.copy_(c_rand)
                t0 = _clock()
                torch.mm(a, b, out=c)
                times.append(_clock() - t0)
    return times[warmup:]


def sweep_matmul(*, device: str = "cpu", dtype: str = "float32",
                 shapes: Sequence[Shape] | None = None, iterations: int = 10,
                 warmup: int = 3, on_progress: Callable[[int, int], None] | None = None,
                 threads: int | None = None, tf32: bool = False,
                 device_warmup_s: float | None = None,
                 flush_bytes: int | None = None) -> MatmulSweep:
    """Sweep matmul shapes and return the achievable FLOP/s (see the module docstring).

    ``shapes`` default to :func:`default_shapes`; ``iterations`` / ``warmup`` are per shape
    (mamf-finder uses 100 / 50 on GPUs); ``threads`` sets ``torch.set_num_threads`` for a CPU
    sweep (default: as it is); ``tf32`` allows TF32 for float32 on CUDA;
    ``device_warmup_s`` runs the first shape this long first (default 30 s on CUDA as
    mamf-finder, 0 on CPU); ``flush_bytes`` is the cache-evicting buffer (default 256 MiB on
    CUDA, twice the largest CPU cache on CPU). ``on_progress(done, total)`` is called after
    each shape. A dtype this torch cannot multiply on the device raises ``ConfigError``.
    """
    shapes = tuple(tuple(s) for s in (shapes or default_shapes(  # type: ignore[misc]
        "cpu" if device == "cpu" else "cuda")))
    _check(device, dtype, shapes, iterations, warmup, threads, device_warmup_s)
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device: got {device!r} but this torch sees no CUDA device "
                          f"(torch {torch.__version__}); use --device cpu")
    warm_s = device_warmup_s if device_warmup_s is not None else (0.0 if device == "cpu"
                                                                  else 30.0)
    flush_n = flush_bytes or (_cpu_flush_bytes() if device == "cpu" else CUDA_FLUSH_BYTES)
    flush = torch.empty(max(1, flush_n // 4), dtype=torch.int32, device=device)
    torch_dtype = getattr(torch, dtype)
    t_start = time.perf_counter()
    results: list[ShapeResult] = []
    with _settings(torch, device, threads, tf32):
        used_threads = torch.get_num_threads() if device == "cpu" else None
        try:
            if warm_s > 0:
                until = time.monotonic() + warm_s
                while time.monotonic() < until:
                    _time_shape(torch, shapes[0], device=device, dtype=torch_dtype,
                                iterations=1, warmup=0, flush=flush)
            for i, shape in enumerate(shapes):
                times = _time_shape(torch, shape, device=device, dtype=torch_dtype,
                                    iterations=iterations, warmup=warmup, flush=flush)
                results.append(shape_result(shape, times))
                logger.debug("matmul %s: %.3g FLOP/s median", shape,
                             results[-1].median_flops_per_s)
                if on_progress is not None:
                    on_progress(i + 1, len(shapes))
        except (RuntimeError, NotImplementedError) as exc:
            if "not implemented" in str(exc).lower() or "unsupported" in str(exc).lower():
                raise ConfigError(f"dtype: torch {torch.__version__} cannot multiply {dtype} "
                                  f"matrices on {device} ({' '.join(str(exc).split())[:120]})"
                                  "; pick another --dtype") from exc
            raise
    return summarize(results, device=device, dtype=dtype, iterations=iterations,
                     warmup=warmup, threads=used_threads,
                     tf32=(tf32 if device != "cpu" and dtype == "float32" else None),
                     flush_bytes=flush_n, device_warmup_s=warm_s,
                     elapsed_s=time.perf_counter() - t_start, machine=describe_machine())


def summarize(results: Sequence[ShapeResult], **fields: Any) -> MatmulSweep:
    """The sweep from its per-shape results: the achievable figure is the highest median,
    the first shape reaching it wins ties; pure (``fields`` fill the rest)."""
    if not results:
        raise ConfigError("results: got none, expected at least one shape result")
    best = max(results, key=lambda r: r.median_flops_per_s)
    geomean = math.exp(statistics.fmean(math.log(r.mean_flops_per_s) for r in results))
    return MatmulSweep(peak_flops_per_s=best.median_flops_per_s, best_shape=best.shape,
                       best_single_flops_per_s=max(r.best_flops_per_s for r in results),
                       geomean_flops_per_s=geomean, per_shape=tuple(results), **fields)
