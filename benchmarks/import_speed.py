"""Import speed of a 1,000,000-row CSV log (a step column + 8 metrics) into a ``Run``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/import_speed.py                # 1M rows, 5 rounds
    .venv/bin/python benchmarks/import_speed.py --rows 100000 --repeats 3

Two files, both cached under ``.bench/data/``:

- ``short``: the log of synthetic_log.py (the same file diagnose_1m.py times): 4-5 significant
  digits per value, as loggers that format their floats write, and a sparse ``val_loss``
  column (empty cells between evals, like Lightning's CSVLogger).
- ``repr``: the same numbers written with Python's ``repr`` (up to 17 significant digits), as
  Lightning's CSVLogger and ``csv.writer`` write floats. Parsing these is slower: a 17-digit
  decimal needs the slow path of any correctly rounding float parser.

Each round runs ``trainmedic.run.load_run(path)`` in a fresh child process, once with each
reader: pyarrow's (``run/csv_arrow.py``, taken for large bodies when pyarrow is installed)
and the numpy reader (``TRAINMEDIC_CSV_NO_ARROW=1``; with ``--one-process`` also without its
forked second reader), and reports its wall time (process start to exit, imports included),
the time of ``load_run`` alone measured inside it, and the child's own peak RSS (see
child_process.py). The budget of the whole ``trainmedic diagnose`` (issue 12) is 3x a pyarrow
read of the same file and 300 MB: see diagnose_1m.py. Prints the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from child_process import run_measured  # noqa: E402
from machine import one_line  # noqa: E402

_CHILD = """
import resource, sys, time
t = time.perf_counter()
from trainmedic.run import load_run
t1 = time.perf_counter()
c1 = time.process_time()
run = load_run(sys.argv[1])
t2 = time.perf_counter()
c2 = time.process_time()
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(run.num_points, t1 - t, t2 - t1, c2 - c1, kids.ru_utime + kids.ru_stime,
      kids.ru_maxrss / 1024, "pyarrow" if "pyarrow" in sys.modules else "numpy")
"""


def _short_file(rows: int) -> Path:
    out = subprocess.run([sys.executable, str(HERE / "synthetic_log.py"), str(rows)],
                         capture_output=True, text=True, check=True)
    return Path(json.loads(out.stdout.strip().splitlines()[-1])["path"])


def _repr_file(short: Path) -> Path:
    """The same table with every float written by repr (full precision)."""
    dst = short.with_name(short.stem + "_repr.csv")
    if dst.is_file() and dst.stat().st_mtime >= short.stat().st_mtime:
        return dst
    import numpy as np

    rng = np.random.default_rng(7)
    tmp = dst.with_suffix(".tmp")
    with short.open() as src, tmp.open("w") as f:
        f.write(src.readline())
        for line in src:
            cells = line.rstrip("\n").split(",")
            out = [cells[0]]
            for c in cells[1:]:
                # Add float32-like noise below the printed digits so repr needs ~17 digits,
                # as a float32 loss converted to a Python float does.
                out.append(repr(float(np.float32(float(c) * (1 + 1e-6 * rng.random()))))
                           if c else "")
            f.write(",".join(out) + "\n")
    tmp.replace(dst)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=("short", "repr"), help="time one file only")
    ap.add_argument("--one-process", action="store_true",
                    help="set TRAINMEDIC_CSV_ONE_PROCESS=1: the numpy reader forks no second "
                    "reader")
    args = ap.parse_args()

    short = _short_file(args.rows)
    files = {"short": short}
    if args.only != "short":
        files["repr"] = _repr_file(short)
    if args.only == "repr":
        files.pop("short")
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.one_process:
        base["TRAINMEDIC_CSV_ONE_PROCESS"] = "1"
    readers = {"pyarrow": base, "numpy": {**base, "TRAINMEDIC_CSV_NO_ARROW": "1"}}
    print(one_line())
    print("numpy reader: " + ("one process (TRAINMEDIC_CSV_ONE_PROCESS=1)" if args.one_process
                              else "two processes where the machine allows"))
    results: dict[tuple[str, str], list[tuple[float, ...]]] = {
        (f, r): [] for f in files for r in readers}
    used: dict[tuple[str, str], set[str]] = {k: set() for k in results}
    for p in files.values():  # warm the page cache and write .pyc files
        for env in readers.values():
            run_measured([sys.executable, "-c", _CHILD, str(p)], env=env)
    for _ in range(args.repeats):
        for name, p in files.items():
            for reader, env in readers.items():
                m = run_measured([sys.executable, "-c", _CHILD, str(p)], env=env)
                if m.exit_code != 0:
                    sys.exit(f"load_run failed on {p}: {m.stderr.strip()[-400:]}")
                _points, t_import, t_load, cpu, cpu_kid, rss_kid, got = m.stdout.split()
                used[(name, reader)].add(got)
                results[(name, reader)].append(
                    (m.wall_s, float(t_load), float(t_import), m.peak_rss_mb, float(cpu),
                     float(cpu_kid), float(rss_kid)))
    print(f"{'file':<7}{'reader':<9}{'MB':>6}{'rows':>9}{'process wall s':>16}{'load_run s':>12}"
          f"{'imports s':>11}{'peak RSS MB':>13}{'cpu s':>8}{'fork cpu s':>12}"
          f"{'fork RSS MB':>13}   (median of {args.repeats}; RSS max)")
    for (name, reader), rows in results.items():
        p = files[name]
        label = reader if used[(name, reader)] == {reader} else "/".join(sorted(used[(name,
                                                                                     reader)]))
        print(f"{name:<7}{label:<9}{p.stat().st_size / 1e6:>6.1f}{args.rows:>9}"
              f"{statistics.median(r[0] for r in rows):>16.3f}"
              f"{statistics.median(r[1] for r in rows):>12.3f}"
              f"{statistics.median(r[2] for r in rows):>11.3f}"
              f"{max(r[3] for r in rows):>13.0f}"
              f"{statistics.median(r[4] for r in rows):>8.3f}"
              f"{statistics.median(r[5] for r in rows):>12.3f}"
              f"{max(r[6] for r in rows):>13.0f}")
    print("reader: which one read the body (pyarrow only where installed and the body is at")
    print("least csvlog.ARROW_MIN_BYTES). cpu s: CPU time of load_run in the measured process")
    print("(pyarrow's threads included); fork cpu s: CPU time of the numpy reader's forked")
    print("second reader (0 when one process read the file). Peak RSS is the measured")
    print("process's own; fork RSS is the forked reader's peak, which counts the pages it")
    print("shares with its parent (copy-on-write, and the shared result buffer).")
    print("On a busy machine wall time exceeds the CPU times: check the load average above.")


if __name__ == "__main__":
    main()
