"""Read 1,000,000 TensorBoard scalar events: trainmedic's reader against TensorBoard's own
``EventAccumulator``, on the same file, side by side in one run.

Usage (from the repository root)::

    .venv/bin/python benchmarks/tensorboard_read.py                 # 1M events, 3 rounds
    .venv/bin/python benchmarks/tensorboard_read.py --events 100000 --repeats 1

The event file is written once by ``torch.utils.tensorboard.SummaryWriter`` (TensorBoard's own
``EventFileWriter`` when torch is absent) in a child process and cached under
``.bench/tb/<events>/``: 4 tags (train/loss, train/learning_rate, train/grad_norm,
eval/loss) logged every step, 250,000 steps for 1M events. Writing it takes a few minutes.

Each reader then runs as a child process (so each one's peak RSS is its own; see
child_process.py): trainmedic's ``read_tensorboard`` and ``EventAccumulator(path,
size_guidance={"scalars": 0})`` (0 = keep every point, no reservoir sampling) followed by
``Scalars(tag)`` for every tag. Both must return every point; the script checks the counts.
Target (issue 2): trainmedic at least as fast as EventAccumulator. Prints the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from child_process import run_measured  # noqa: E402
from machine import one_line  # noqa: E402

TAGS = ("train/loss", "train/learning_rate", "train/grad_norm", "eval/loss")

_OURS = """
import sys, time
t = time.perf_counter()
from trainmedic.run.tbevents import read_tensorboard
table = read_tensorboard(__import__('pathlib').Path(sys.argv[1]))
n = sum(len(s) for s in table.columns.values())
print(n, time.perf_counter() - t)
"""

_EA = """
import sys, time
t = time.perf_counter()
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})
ea.Reload()
n = sum(len(ea.Scalars(tag)) for tag in ea.Tags()['scalars'])
print(n, time.perf_counter() - t)
"""


def _generate(path: Path, events: int) -> None:
    """Write ``events`` scalar events (len(TAGS) per step) into the folder ``path``."""
    import math
    import random

    path.mkdir(parents=True, exist_ok=True)
    steps = events // len(TAGS)
    rng = random.Random(0)
    try:
        from torch.utils.tensorboard import SummaryWriter

        w = SummaryWriter(log_dir=str(path), max_queue=10_000, flush_secs=3600)
        for s in range(steps):
            w.add_scalar(TAGS[0], 2.0 + 8.0 / math.sqrt(1 + s) + 0.05 * rng.random(), s)
            w.add_scalar(TAGS[1], 3e-4 * min(1.0, (s + 1) / 2000), s)
            w.add_scalar(TAGS[2], 0.3 + 0.1 * rng.random(), s)
            w.add_scalar(TAGS[3], 2.1 + 8.0 / math.sqrt(1 + s), s)
        w.close()
        writer = "torch.utils.tensorboard.SummaryWriter"
    except ImportError:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        fw = EventFileWriter(str(path), max_queue_size=10_000, flush_secs=3600)
        for s in range(steps):
            vals = (2.0 + 8.0 / math.sqrt(1 + s) + 0.05 * rng.random(),
                    3e-4 * min(1.0, (s + 1) / 2000), 0.3 + 0.1 * rng.random(),
                    2.1 + 8.0 / math.sqrt(1 + s))
            for tag, v in zip(TAGS, vals, strict=True):
                fw.add_event(event_pb2.Event(step=s, wall_time=1.7e9 + s, summary=summary_pb2.
                             Summary(value=[summary_pb2.Summary.Value(tag=tag,
                                                                      simple_value=v)])))
        fw.close()
        writer = "tensorboard EventFileWriter"
    files = sorted(path.glob("events.out.tfevents.*"))
    (path / "bench.json").write_text(json.dumps({"events": steps * len(TAGS), "writer": writer,
                                                 "file": files[-1].name}))


def _ensure(events: int) -> tuple[Path, dict]:
    folder = ROOT / ".bench" / "tb" / str(events)
    marker = folder / "bench.json"
    if not marker.is_file():
        for old in folder.glob("events.out.tfevents.*"):
            old.unlink()
        print(f"writing {events} events to {folder} (once; cached) ...", file=sys.stderr)
        subprocess.run([sys.executable, __file__, "--generate", str(events)], check=True)
    info = json.loads(marker.read_text())
    return folder / info["file"], info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="rounds (each runs both readers)")
    ap.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        _generate(ROOT / ".bench" / "tb" / str(args.generate), args.generate)
        return
    path, info = _ensure(args.events)
    print(one_line())
    print(f"file: {path} ({path.stat().st_size / 1e6:.1f} MB, {info['events']} scalar events, "
          f"written by {info['writer']})")
    env_py = sys.executable
    results: dict[str, list[tuple[float, float, float]]] = {
        "trainmedic": [], "EventAccumulator": []}
    for _ in range(args.repeats):
        for name, code in (("trainmedic", _OURS), ("EventAccumulator", _EA)):
            m = run_measured([env_py, "-c", code, str(path)], timeout_s=3600)
            if m.exit_code != 0:
                sys.exit(f"{name} failed: {m.stderr.strip()[-400:]}")
            n_str, inner = m.stdout.split()
            if int(n_str) != info["events"]:
                sys.exit(f"{name} returned {n_str} points, expected {info['events']}")
            results[name].append((m.wall_s, float(inner), m.peak_rss_mb))
    print(f"{'reader':<18}{'wall s (median)':>16}{'in-process s':>14}{'peak RSS MB':>13}")
    med = {}
    for name, rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        inner = statistics.median(r[1] for r in rows)
        rss = max(r[2] for r in rows)
        med[name] = wall
        print(f"{name:<18}{wall:>16.2f}{inner:>14.2f}{rss:>13.0f}")
    ratio = med["EventAccumulator"] / med["trainmedic"]
    print(f"trainmedic is {ratio:.1f}x faster than EventAccumulator (wall, whole process) "
          f"-> target 'at least as fast': {'met' if ratio >= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
