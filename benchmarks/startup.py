"""Start-up cost of `trainmedic diagnose` on a small log, as a ratio to importing its core
dependencies, and proof that it does not import torch (or pyarrow).

Usage (from the repository root)::

    .venv/bin/python benchmarks/startup.py            # median of 10 rounds
    .venv/bin/python benchmarks/startup.py --runs 20 --json

What it does:

1. writes a small healthy CSV log (300 steps: step, loss, lr, grad_norm) under .bench/data/;
2. times, interleaved round by round (one warm-up round, then the median of ``--runs``):
   ``python -c "import numpy, rich, click"`` (the reference: the core dependencies' own
   import), ``trainmedic diagnose SMALL.csv`` (the terminal report, piped) and
   ``trainmedic diagnose SMALL.csv --json``; target (issue 12): each trainmedic mode at most
   2.5x the reference, measured in the same run;
3. runs the same command in-process through a small driver (the console script's entry point,
   called from ``python -c``) and lists which heavy modules ended up in ``sys.modules``
   (torch and pyarrow must not be among them);
4. runs the driver under ``python -X importtime`` and prints the slowest imports that the
   reference does not make (what trainmedic itself adds to start-up), with who imported them.

For context it also times the bare interpreter (``python -c pass``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from child_process import run_measured  # noqa: E402
from diagnosers import TRAINMEDIC_BIN, all_tools  # noqa: E402
from machine import describe, one_line  # noqa: E402

REPO = HERE.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
TARGET_RATIO = 2.5
REFERENCE = "import numpy, rich, click"
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Children may write .pyc files (the warm-up round does), as an installed package has them:
with PYTHONDONTWRITEBYTECODE set (as in some CI images and sandboxes) every run would compile
trainmedic's sources again, while numpy, rich and click have theirs from pip."""
HEAVY_MODULES = ("torch", "tensorboard", "tensorflow", "pandas", "scipy", "matplotlib",
                 "sklearn", "jax", "numba", "plotly", "google.protobuf", "pyarrow")

DRIVER = r"""
import json, sys
import importlib
report, entry, path, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
module, _, attr = entry.partition(":")  # the console script's entry point, resolved by the caller
main = getattr(importlib.import_module(module), attr)
sys.argv = ["trainmedic", "diagnose", path, *extra]
code = None
try:
    code = main()  # a console-script main may return its exit code or raise SystemExit
except SystemExit as exc:
    code = exc.code
finally:
    heavy = __HEAVY__
    loaded = [m for m in heavy if m in sys.modules]
    with open(report, "w") as f:
        json.dump({"exit": code, "heavy_loaded": loaded, "modules": len(sys.modules)}, f)
""".replace("__HEAVY__", repr(HEAVY_MODULES))


def small_log(rows: int = 300) -> Path:
    """A healthy few-hundred-step CSV (deterministic), written once."""
    path = REPO / ".bench" / "data" / f"small_{rows}.csv"
    if path.is_file():
        return path
    rng = random.Random(7)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step,loss,lr,grad_norm"]
    for s in range(1, rows + 1):
        lr = 1e-3 * min(1.0, s / 30) * (0.5 * (1 + math.cos(math.pi * s / rows)))
        loss = (0.8 + 3.0 * math.exp(-s / 80)) * math.exp(rng.gauss(0, 0.03))
        gn = (0.5 + 2.0 * math.exp(-s / 50)) * math.exp(rng.gauss(0, 0.15))
        lines.append(f"{s},{loss:.5f},{lr:.4e},{gn:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _interleaved(commands: dict[str, list[str]], runs: int
                 ) -> dict[str, tuple[list[float], list[int]]]:
    """Wall times and exit codes of each command, run once per round in turn (one warm-up
    round for the page cache and .pyc files, not kept), so drift in the machine hits all."""
    out: dict[str, tuple[list[float], list[int]]] = {k: ([], []) for k in commands}
    for round_no in range(runs + 1):
        for name, argv in commands.items():
            m = run_measured(argv, timeout_s=120, env=CHILD_ENV)
            if round_no:
                out[name][0].append(m.wall_s)
                out[name][1].append(m.exit_code)
    return {k: (w, sorted(set(c))) for k, (w, c) in out.items()}


def _entry_point() -> str:
    """``module:function`` of the ``trainmedic`` console script, read from .venv's metadata (so
    the driver itself need not import importlib.metadata, which would show in its import
    times)."""
    out = subprocess.run(
        [str(VENV_PYTHON), "-c", "from importlib.metadata import entry_points as e; "
         "print(next(iter(e(group='console_scripts', name='trainmedic'))).value)"],
        capture_output=True, text=True, check=False, timeout=60)
    return out.stdout.strip() or "trainmedic.cli.main:main"


def _parse_importtime(stderr: str, known: set[str] | None = None
                      ) -> list[tuple[str, float, list[str]]]:
    """(module, seconds, importers from the nearest up) per ``-X importtime`` line. The
    seconds are the module's cumulative time less what went to modules in ``known`` (those
    the reference imports too). The report lists a module's imports before the module itself,
    one level deeper."""
    rows: list[tuple[str, int, int]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((name.strip(), int(parts[0]), depth))
    known = known or set()
    out = []
    for i, (name, _self_us, depth) in enumerate(rows):
        added = 0
        for j in range(i, -1, -1):  # the module itself, then its subtree (listed before it)
            if j < i and rows[j][2] <= depth:
                break
            if rows[j][0] not in known:
                added += rows[j][1]
        chain, d = [], depth
        for later in rows[i + 1:]:
            if later[2] < d:
                chain.append(later[0])
                d = later[2]
        out.append((name, added / 1e6, chain))
    return out


def _import_times(path: Path, report: str, top: int = 14) -> list[dict]:
    """The slowest imports of ``trainmedic diagnose SMALL.csv`` beyond what ``python -c
    "import numpy, rich, click"`` imports: what trainmedic adds to start-up. Each module's
    time counts its own subtree except modules the reference imports; a module inside a
    listed one is not listed again. ``imported_by`` is the chain of importers (empty: imported
    at run time, inside a function)."""
    ref = run_measured([str(VENV_PYTHON), "-X", "importtime", "-c", REFERENCE], timeout_s=120,
                       env=CHILD_ENV)
    known = {name for name, *_ in _parse_importtime(ref.stderr)}
    m = run_measured([str(VENV_PYTHON), "-X", "importtime", "-c", DRIVER, report,
                      _entry_point(), str(path)], timeout_s=120, env=CHILD_ENV)
    extra = [r for r in _parse_importtime(m.stderr, known) if r[0] not in known]
    extra.sort(key=lambda r: -r[1])
    picked: list[dict] = []
    for name, sec, chain in extra:
        if any(p["module"] in chain for p in picked):
            continue  # inside a slower module already listed
        picked.append({"module": name, "seconds": sec, "imported_by": chain[:4]})
        if len(picked) == top:
            break
    return picked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    ap.add_argument("--rows", type=int, default=300, help="rows in the small log (default 300)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = ap.parse_args(argv)

    path = small_log(args.rows)
    result: dict = {"benchmark": "startup", "machine": describe(), "input": str(path),
                    "rows": args.rows, "runs": args.runs, "reference": f"python -c {REFERENCE!r}"}
    if not TRAINMEDIC_BIN.is_file():
        msg = f"startup: {TRAINMEDIC_BIN} not found: install with `pip install -e .` into .venv"
        print(msg, file=sys.stderr)
        return 2
    modes = {"report": [], "json": ["--json"]}  # the default terminal report (piped), --json
    commands = {"python_bare": [str(VENV_PYTHON), "-c", "pass"],
                "reference": [str(VENV_PYTHON), "-c", REFERENCE]}
    for mode, extra in modes.items():
        commands[mode] = [str(TRAINMEDIC_BIN), "diagnose", str(path), *extra]
    timed = _interleaved(commands, args.runs)
    for name, (walls, codes) in timed.items():
        result[f"{name}_wall_s_median"] = statistics.median(walls)
        result[f"{name}_wall_s_all"] = walls
        result[f"{name}_exit_codes"] = codes
    ref_s = result["reference_wall_s_median"]
    for mode in modes:
        result[f"{mode}_ratio"] = result[f"{mode}_wall_s_median"] / ref_s
    result["competitors_wall_s_median"] = {}
    for tool in all_tools()[1:]:
        if tool.available():
            comp = _interleaved({tool.name: tool.argv(str(path))}, max(3, args.runs // 2))
            result["competitors_wall_s_median"][tool.name] = statistics.median(
                comp[tool.name][0])

    result["in_process"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = str(Path(tmp) / "modules.json")
        for mode, extra in modes.items():
            m = run_measured([str(VENV_PYTHON), "-c", DRIVER, report, _entry_point(), str(path),
                              *extra], timeout_s=120, env=CHILD_ENV)
            try:
                mods = json.loads(Path(report).read_text())
                Path(report).unlink()
            except (OSError, ValueError):
                mods = {"exit": None, "heavy_loaded": None, "modules": None,
                        "error": m.stderr.strip().splitlines()[-1:] or ["driver failed"]}
            result["in_process"][mode] = mods
        result["slowest_added_imports"] = _import_times(path, report)

    codes = sorted(set(result["report_exit_codes"]) | set(result["json_exit_codes"]))
    ok_codes = all(c in (0, 1) for c in codes)
    worst = max(result["report_ratio"], result["json_ratio"])
    loaded = [result["in_process"][m_].get("heavy_loaded") for m_ in modes]
    light = all(x is not None and not x for x in loaded)
    result["verdicts"] = {
        "ratio": ("PASS" if ok_codes and worst <= TARGET_RATIO else "FAIL")
        + f" (slower mode {worst:.2f}x the reference, exit codes {codes})",
        "no heavy": ("PASS" if light and ok_codes else "FAIL")
        + f" (heavy modules loaded: {loaded})",
    }

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(one_line(result["machine"]))
        print(f"input: {path} ({args.rows} rows); median of {args.runs} rounds after 1 warm-up, "
              "commands interleaved within each round")
        print(f"reference: python -c {REFERENCE!r}: {ref_s:.3f} s "
              f"(python -c pass: {result['python_bare_wall_s_median']:.3f} s)")
        for mode in modes:
            w = result[f"{mode}_wall_s_all"]
            label = "--json" if mode == "json" else "(terminal report, piped)"
            print(f"trainmedic diagnose {label}: {statistics.median(w):.3f} s = "
                  f"{result[f'{mode}_ratio']:.2f}x the reference (min {min(w):.3f}, max "
                  f"{max(w):.3f}); exit codes {result[f'{mode}_exit_codes']}")
            mods = result["in_process"][mode]
            print(f"  in-process driver: exit {mods.get('exit')}, {mods.get('modules')} modules, "
                  f"heavy modules loaded: {mods.get('heavy_loaded')}")
            if "error" in mods:
                print(f"  driver error: {mods['error']}")
        comp = ", ".join(f"{k} {v:.3f} s" for k, v in result["competitors_wall_s_median"].items())
        if comp:
            print(f"same file: {comp}")
        print("slowest imports beyond the reference's (python -X importtime, one run; each with "
              "its subtree, less modules the reference imports too):")
        for row in result["slowest_added_imports"]:
            print(f"  {row['seconds'] * 1000:8.1f} ms  {row['module']:<36} <- "
                  + (" <- ".join(row["imported_by"]) or "(at run time)"))
        print(f"target: each mode <= {TARGET_RATIO}x the reference; no torch or pyarrow")
        for name, verdict in result["verdicts"].items():
            print(f"  {name:<10} {verdict}")
    return 0 if all(v.startswith("PASS") for v in result["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
