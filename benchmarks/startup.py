"""Start-up cost of `trainmedic diagnose` on a small log, and proof that it does not import torch.

Usage (from the repository root)::

    .venv/bin/python benchmarks/startup.py            # median of 10 runs
    .venv/bin/python benchmarks/startup.py --runs 20 --json

What it does:

1. writes a small healthy CSV log (300 steps: step, loss, lr, grad_norm) under .bench/data/;
2. times ``.venv/bin/trainmedic diagnose SMALL.csv --json`` as a subprocess: one warm-up,
   then the median of ``--runs`` runs (target: under 0.3 s);
3. runs the same command in-process through a small driver (the console script's entry point,
   called from ``python -c``) and lists which heavy modules ended up in ``sys.modules``
   (torch must not be among them);
4. runs the driver under ``python -X importtime`` and prints the slowest top-level imports,
   which is where start-up time goes.

For context it also times the bare interpreter (``python -c pass``) and ``import numpy``.
"""

from __future__ import annotations

import argparse
import json
import math
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
TARGET_WALL_S = 0.3
HEAVY_MODULES = ("torch", "tensorboard", "tensorflow", "pandas", "scipy", "matplotlib",
                 "sklearn", "jax", "numba", "plotly", "google.protobuf")

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


def _walls(argv: list[str], runs: int) -> tuple[list[float], list[int]]:
    run_measured(argv, timeout_s=120)  # warm-up (page cache, .pyc)
    ms = [run_measured(argv, timeout_s=120) for _ in range(runs)]
    return [m.wall_s for m in ms], sorted({m.exit_code for m in ms})


def _entry_point() -> str:
    """``module:function`` of the ``trainmedic`` console script, read from .venv's metadata (so
    the driver itself need not import importlib.metadata, which would show in its import
    times)."""
    out = subprocess.run(
        [str(VENV_PYTHON), "-c", "from importlib.metadata import entry_points as e; "
         "print(next(iter(e(group='console_scripts', name='trainmedic'))).value)"],
        capture_output=True, text=True, check=False, timeout=60)
    return out.stdout.strip() or "trainmedic.cli.main:main"


def _import_times(path: Path, report: str, top: int = 10) -> list[tuple[str, float]]:
    """Slowest top-level imports (cumulative µs -> s) from ``-X importtime``, default report."""
    m = run_measured([str(VENV_PYTHON), "-X", "importtime", "-c", DRIVER, report,
                      _entry_point(), str(path)], timeout_s=120)
    rows: list[tuple[str, float]] = []
    for line in m.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:"):].split("|")]
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        name = parts[2]
        if line.split("|")[2].startswith("  "):
            continue  # nested import: already inside its parent's cumulative time
        rows.append((name.strip(), int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="timed runs (default 10)")
    ap.add_argument("--rows", type=int, default=300, help="rows in the small log (default 300)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = ap.parse_args(argv)

    path = small_log(args.rows)
    result: dict = {"benchmark": "startup", "machine": describe(), "input": str(path),
                    "rows": args.rows, "runs": args.runs}
    if not TRAINMEDIC_BIN.is_file():
        msg = f"startup: {TRAINMEDIC_BIN} not found: install with `pip install -e .` into .venv"
        print(msg, file=sys.stderr)
        return 2
    modes = {"report": [], "json": ["--json"]}  # the default terminal report (piped), --json
    for mode, extra in modes.items():
        walls, codes = _walls([str(TRAINMEDIC_BIN), "diagnose", str(path), *extra], args.runs)
        result[f"{mode}_wall_s_median"] = statistics.median(walls)
        result[f"{mode}_wall_s_all"] = walls
        result[f"{mode}_exit_codes"] = codes
    py_walls, _ = _walls([str(VENV_PYTHON), "-c", "pass"], args.runs)
    np_walls, _ = _walls([str(VENV_PYTHON), "-c", "import numpy"], args.runs)
    result["python_bare_wall_s_median"] = statistics.median(py_walls)
    result["python_import_numpy_wall_s_median"] = statistics.median(np_walls)
    result["competitors_wall_s_median"] = {}
    for tool in all_tools()[1:]:
        if tool.available():
            cw, cc = _walls(tool.argv(str(path)), max(3, args.runs // 2))
            result["competitors_wall_s_median"][tool.name] = statistics.median(cw)

    result["in_process"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = str(Path(tmp) / "modules.json")
        for mode, extra in modes.items():
            m = run_measured([str(VENV_PYTHON), "-c", DRIVER, report, _entry_point(), str(path),
                              *extra], timeout_s=120)
            try:
                mods = json.loads(Path(report).read_text())
                Path(report).unlink()
            except (OSError, ValueError):
                mods = {"exit": None, "heavy_loaded": None, "modules": None,
                        "error": m.stderr.strip().splitlines()[-1:] or ["driver failed"]}
            result["in_process"][mode] = mods
        result["slowest_imports"] = _import_times(path, report)

    codes = sorted(set(result["report_exit_codes"]) | set(result["json_exit_codes"]))
    ok_codes = all(c in (0, 1) for c in codes)
    worst = max(result["report_wall_s_median"], result["json_wall_s_median"])
    loaded = [result["in_process"][m_].get("heavy_loaded") for m_ in modes]
    torch_free = all(x is not None and "torch" not in x for x in loaded)
    result["verdicts"] = {
        "wall": ("PASS" if ok_codes and worst < TARGET_WALL_S else "FAIL")
        + f" (slower mode {worst:.3f} s, exit codes {codes})",
        "no torch": ("PASS" if torch_free and ok_codes else "FAIL")
        + f" (heavy modules loaded: {loaded})",
    }

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(one_line(result["machine"]))
        print(f"input: {path} ({args.rows} rows)")
        for mode in modes:
            w = result[f"{mode}_wall_s_all"]
            label = "--json" if mode == "json" else "(terminal report, piped)"
            print(f"trainmedic diagnose {label}: median {statistics.median(w):.3f} s over "
                  f"{args.runs} runs after 1 warm-up (min {min(w):.3f}, max {max(w):.3f}); "
                  f"exit codes {result[f'{mode}_exit_codes']}")
            mods = result["in_process"][mode]
            print(f"  in-process driver: exit {mods.get('exit')}, {mods.get('modules')} modules, "
                  f"heavy modules loaded: {mods.get('heavy_loaded')}")
            if "error" in mods:
                print(f"  driver error: {mods['error']}")
        comp = ", ".join(f"{k} {v:.3f} s" for k, v in result["competitors_wall_s_median"].items())
        print(f"for context: python -c pass {result['python_bare_wall_s_median']:.3f} s, "
              f"python -c 'import numpy' {result['python_import_numpy_wall_s_median']:.3f} s"
              + (f"; same file: {comp}" if comp else ""))
        print("slowest top-level imports (python -X importtime, cumulative):")
        for name, sec in result["slowest_imports"]:
            print(f"  {sec * 1000:8.1f} ms  {name}")
        print(f"target: wall < {TARGET_WALL_S} s and torch not imported")
        for name, verdict in result["verdicts"].items():
            print(f"  {name:<10} {verdict}")
    return 0 if all(v.startswith("PASS") for v in result["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
