"""`trainmedic diagnose` on a 1,000,000-step CSV against a pyarrow read of the same file.

Usage (from the repository root)::

    .venv/bin/python benchmarks/diagnose_1m.py              # 1M rows, 3 timed rounds
    .venv/bin/python benchmarks/diagnose_1m.py --rows 100000 --repeats 5
    .venv/bin/python benchmarks/diagnose_1m.py --json > result.json

The input (see synthetic_log.py: a step column and 8 metrics, val_loss sparse) is generated
once, in a separate process, and cached under .bench/data/. Every round then runs, one after
the other on the same file (interleaved, so drift in the machine hits all alike):

- the reference: ``python -c "import pyarrow.csv; pyarrow.csv.read_csv(PATH)"`` as its own
  process, timed from spawn to exit, with its import and read times measured inside;
- ``trainmedic diagnose PATH --json`` as its own process: wall time and its own peak RSS
  (os.wait4 through GNU time, see child_process.py);
- the same diagnosis in a driver process that times its phases: Python imports, the log
  import (``load_run``; which reader read the body), every detector, the rest of the engine
  (folding, routing) and the JSON report;
- ``trainmedic diagnose`` again with ``TRAINMEDIC_CSV_NO_ARROW=1`` (row "tm numpy-read"): the
  numpy reader, which reads where pyarrow is not installed (``--no-numpy-reader`` skips it);
- runmedic and losslint where .bench/venv has them (see benchmarks/README.md).

One warm-up round, then ``--repeats`` rounds; every figure is the median over those rounds.

Targets (issue 12, "Performance"): trainmedic's wall at most 3x the reference process's wall,
measured in the same run, and at most 300 MB peak RSS; and it names the injected loss spike.
The reference is a process that starts Python, imports pyarrow and reads the file, because
``trainmedic diagnose`` is a process that does all of that and more; the ratio to the bare
``read_csv`` call (import excluded) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from child_process import RSS_METHOD, Measurement, floor_rss_mb, run_measured  # noqa: E402
from diagnosers import Tool, ToolFinding, all_tools, names_window  # noqa: E402
from machine import describe, one_line  # noqa: E402

TARGET_RATIO = 3.0
"""trainmedic's wall at most this times the reference process's (pyarrow import + read)."""
TARGET_RSS_MB = 300.0
SPIKE_TOLERANCE_STEPS = 50
"""A spike finding counts when it names a step from onset - this to recovery + this."""
VENV_PYTHON = HERE.parent / ".venv" / "bin" / "python"
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Children may write .pyc files (the warm-up round does), as an installed package has them
(see startup.py)."""
NUMPY_ROW = "tm numpy-read"
"""The row of ``trainmedic diagnose`` run with TRAINMEDIC_CSV_NO_ARROW=1 (the reader used
where pyarrow is not installed, and the one before pyarrow's)."""

_PYARROW_READ = r"""
import sys, time
t0 = time.perf_counter()
import pyarrow.csv
t1 = time.perf_counter()
table = pyarrow.csv.read_csv(sys.argv[1])
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, table.num_rows, pyarrow.__version__)
"""

_PHASES = r"""
import contextlib, io, json, sys, time
t0 = time.perf_counter()
import trainmedic.diagnose.engine as engine
from trainmedic.cli.presenter import present
from trainmedic.diagnose.registry import detectors
from trainmedic.run import load_run
t1 = time.perf_counter()
run = load_run(sys.argv[1])
t2 = time.perf_counter()
reader = "pyarrow" if "pyarrow" in sys.modules else "numpy"
per = {}
real = getattr(engine, "_run_one", None)
if real is not None:  # time each detector inside the real engine call
    def timed(det, run):
        t = time.perf_counter()
        try:
            return real(det, run)
        finally:
            per[det.symptom] = per.get(det.symptom, 0.0) + time.perf_counter() - t
    engine._run_one = timed
t3 = time.perf_counter()
result = engine.diagnose(run)
t4 = time.perf_counter()
if real is None:  # the engine changed: time the detectors one by one instead
    for det in detectors():
        if not det.missing(run):
            t = time.perf_counter()
            det.fn(run)
            per[det.symptom] = time.perf_counter() - t
with contextlib.redirect_stdout(io.StringIO()):
    present(result, run, as_json=True, html=None, verbose=False)
t5 = time.perf_counter()
engine_s = t4 - t3
print(json.dumps({"python_imports_s": t1 - t0, "load_run_s": t2 - t1, "reader": reader,
                  "diagnose_s": engine_s, "detectors_s": per,
                  "engine_rest_s": engine_s - sum(per.values()) if real else None,
                  "report_json_s": t5 - t4}))
"""


def _ensure_log(rows: int) -> dict:
    """Generate (or reuse) the CSV in a child process so this process stays small (see
    child_process.py on why the parent's RSS matters)."""
    out = subprocess.run([sys.executable, str(HERE / "synthetic_log.py"), str(rows)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"diagnose_1m: generating the {rows}-row log failed:\n{out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def _findings(tool: Tool, m: Measurement) -> tuple[list[ToolFinding] | None, str | None]:
    try:
        return tool.parse(m.stdout), None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"unreadable output ({type(exc).__name__}); stderr: {_first_line(m.stderr)}"


def _reference(path: str, timeout_s: float) -> dict | None:
    """One pyarrow read of ``path`` in its own process; None when pyarrow is not installed."""
    m = run_measured([str(VENV_PYTHON), "-c", _PYARROW_READ, path], timeout_s=timeout_s,
                     env=CHILD_ENV)
    if m.exit_code != 0:
        return None
    imp, read, rows, version = m.stdout.split()
    return {"wall_s": m.wall_s, "cpu_s": m.cpu_s, "import_s": float(imp), "read_s": float(read),
            "rows": int(rows), "pyarrow": version, "peak_rss_mb": m.peak_rss_mb}


def _phases(path: str, timeout_s: float) -> dict:
    m = run_measured([str(VENV_PYTHON), "-c", _PHASES, path], timeout_s=timeout_s,
                     env=CHILD_ENV)
    if m.exit_code != 0:
        return {"error": _first_line(m.stderr)}
    return {**json.loads(m.stdout.strip().splitlines()[-1]), "wall_s": m.wall_s,
            "peak_rss_mb": m.peak_rss_mb}


def _measure(tools: list[Tool], path: str, repeats: int, timeout_s: float, progress: bool,
             numpy_reader: bool) -> tuple[dict[str, list[Measurement]], list[dict], list[dict]]:
    runs: dict[str, list[Measurement]] = {t.name: [] for t in tools}
    refs: list[dict] = []
    phases: list[dict] = []
    for round_no in range(repeats + 1):  # round 0 is the warm-up, not kept
        label = "warm-up" if round_no == 0 else f"run {round_no}/{repeats}"
        ref = _reference(path, timeout_s)
        if progress and ref:
            print(f"  {'pyarrow read':<14} {label:<9} {ref['wall_s']:7.2f} s "
                  f"(import {ref['import_s']:.2f}, read {ref['read_s']:.2f})", file=sys.stderr)
        for tool in tools:
            m = run_measured(tool.argv(path), timeout_s=timeout_s, env=CHILD_ENV)
            if progress:
                print(f"  {tool.name:<14} {label:<9} {m.wall_s:7.2f} s {m.peak_rss_mb:7.0f} MB "
                      f"exit {m.exit_code}", file=sys.stderr)
            if round_no > 0:
                runs[tool.name].append(m)
        ph = {}
        if tools and tools[0].name == "trainmedic":
            ph = _phases(path, timeout_s)
            if numpy_reader:  # the same command with pyarrow's reader turned off
                m = run_measured(tools[0].argv(path), timeout_s=timeout_s,
                                 env={**CHILD_ENV, "TRAINMEDIC_CSV_NO_ARROW": "1"})
                if progress:
                    print(f"  {NUMPY_ROW:<14} {label:<9} {m.wall_s:7.2f} s "
                          f"{m.peak_rss_mb:7.0f} MB exit {m.exit_code}", file=sys.stderr)
                if round_no > 0:
                    runs.setdefault(NUMPY_ROW, []).append(m)
        if round_no > 0:
            if ref is not None:
                refs.append(ref)
            if ph:
                phases.append(ph)
    return runs, refs, phases


def _summarize(tool: Tool, ms: list[Measurement], truth: dict) -> dict:
    walls = [m.wall_s for m in ms]
    last = ms[-1]
    findings, problem = _findings(tool, last)
    spike = truth["spike"]
    hit = None
    if findings is not None:
        hit = names_window(findings, "loss_spike", spike["onset_step"] - SPIKE_TOLERANCE_STEPS,
                           spike["recovered_step"] + SPIKE_TOLERANCE_STEPS)
    return {
        "tool": tool.name,
        "version": tool.version(),
        "argv": last.argv,
        "wall_s_median": statistics.median(walls),
        "wall_s_all": walls,
        "cpu_s_median": (statistics.median([m.cpu_s for m in ms if m.cpu_s is not None])
                         if any(m.cpu_s is not None for m in ms) else None),
        "peak_rss_mb_max": max(m.peak_rss_mb for m in ms),
        "peak_rss_mb_all": [m.peak_rss_mb for m in ms],
        "exit_codes": sorted({m.exit_code for m in ms}),
        "timed_out": any(m.timed_out for m in ms),
        "output_problem": problem,
        "spike_named": hit is not None,
        "spike_step_named": hit.step if hit else None,
        "findings": [asdict(f) for f in findings] if findings is not None else None,
    }


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _summarize_phases(phases: list[dict]) -> dict:
    ok = [p for p in phases if "error" not in p]
    if not ok:
        return {"error": phases[0]["error"] if phases else "not run"}
    names = sorted({k for p in ok for k in p["detectors_s"]})
    per = {n: statistics.median(p["detectors_s"].get(n, 0.0) for p in ok) for n in names}
    out = {k: _median(ok, k) for k in ("python_imports_s", "load_run_s", "diagnose_s",
                                       "engine_rest_s", "report_json_s", "wall_s")}
    out["peak_rss_mb_max"] = max(p["peak_rss_mb"] for p in ok)
    out["reader"] = sorted({p["reader"] for p in ok})
    out["detectors_s"] = dict(sorted(per.items(), key=lambda kv: -kv[1]))
    out["detectors_sum_s"] = sum(per.values())
    return out


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "n/a"
    return f"{a / b:.1f}x"


def _print_report(result: dict) -> None:
    truth = result["input"]
    sp = truth["spike"]
    print(one_line(result["machine"]))
    print(f"input: {truth['path']} ({truth['rows']:,} rows, {truth['bytes'] / 1e6:.1f} MB, "
          "8 metrics); injected loss spike: onset step "
          f"{sp['onset_step']}, peak {sp['peak_factor']}x at {sp['peak_step']}, "
          f"recovered by {sp['recovered_step']}")
    print(f"timing: median of {result['repeats']} rounds after 1 warm-up, everything "
          f"interleaved; peak RSS = max over those runs of the child's own ru_maxrss ("
          f"{result['rss_method']}; /bin/true reads {result['rss_floor_mb']:.1f} MB)")
    print()
    ref = result["reference"]
    tm = next((r for r in result["tools"] if r["tool"] == "trainmedic" and r.get("ran")), None)
    if ref:
        print(f"reference, pyarrow {ref['pyarrow']} (python -c 'import pyarrow.csv; "
              f"read_csv(PATH)'): process {ref['wall_s']:.2f} s = import "
              f"{ref['import_s']:.2f} s + read {ref['read_s']:.2f} s + interpreter start")
    else:
        print("reference: pyarrow is not installed in .venv (pip install -e '.[fast]')")
    if tm:
        print(f"trainmedic diagnose --json: {tm['wall_s_median']:.2f} s, peak RSS "
              f"{tm['peak_rss_mb_max']:.0f} MB")
    if ref and tm:
        cpu = (f"; CPU seconds (less disturbed by other load): {tm['cpu_s_median']:.2f} vs "
               f"{ref['cpu_s']:.2f} = {tm['cpu_s_median'] / ref['cpu_s']:.2f}x"
               if tm["cpu_s_median"] and ref.get("cpu_s") else "")
        print(f"  ratio to the pyarrow process: {result['ratio_to_reference']:.2f}x "
              f"(target <= {TARGET_RATIO:.0f}x); to the bare read_csv call: "
              f"{tm['wall_s_median'] / ref['read_s']:.1f}x{cpu}")
    ph = result["phases"]
    if "error" in ph:
        print(f"phases: driver failed: {ph['error']}")
    else:
        print(f"phases (driver process, {ph['wall_s']:.2f} s, {ph['peak_rss_mb_max']:.0f} MB): "
              f"python imports {ph['python_imports_s']:.2f} s; log import (load_run, read by "
              f"{'/'.join(ph['reader'])}) {ph['load_run_s']:.2f} s; detectors "
              f"{ph['detectors_sum_s']:.2f} s; rest of the engine "
              + ("n/a" if ph["engine_rest_s"] is None else f"{ph['engine_rest_s']:.2f} s")
              + f"; JSON report {ph['report_json_s']:.2f} s")
        print("per detector (ms, median):")
        items = [f"{name} {sec * 1000:.0f}" for name, sec in ph["detectors_s"].items()
                 if sec >= 0.0005]
        for i in range(0, len(items), 6):
            print("  " + ", ".join(items[i:i + 6]))
    print()
    head = (f"{'tool':<14} {'version':<8} {'wall s (median)':>15} {'min-max':>13} {'CPU s':>6} "
            f"{'peak RSS MB':>11} {'wall vs tm':>10} {'RSS vs tm':>9} {'exit':>5}  spike named?")
    print(head)
    print("-" * len(head))
    ok_tm = tm is not None and tm["exit_codes"] and all(c in (0, 1) for c in tm["exit_codes"])
    for r in result["tools"]:
        if not r.get("ran"):
            print(f"{r['tool']:<14} {'-':<8} {r['reason']}")
            continue
        rng = f"{min(r['wall_s_all']):.2f}-{max(r['wall_s_all']):.2f}"
        wr = _ratio(r["wall_s_median"], tm["wall_s_median"]) if ok_tm and tm else "n/a"
        mr = _ratio(r["peak_rss_mb_max"], tm["peak_rss_mb_max"]) if ok_tm and tm else "n/a"
        if r["output_problem"]:
            spike = r["output_problem"][:90]
        elif r["spike_named"]:
            spike = f"yes, step {r['spike_step_named']:.0f}"
        else:
            spike = "NO"
        codes = ",".join(str(c) for c in r["exit_codes"])
        cpu = "n/a" if r["cpu_s_median"] is None else f"{r['cpu_s_median']:.2f}"
        print(f"{r['tool']:<14} {r['version']:<8} {r['wall_s_median']:>15.2f} {rng:>13} {cpu:>6} "
              f"{r['peak_rss_mb_max']:>11.0f} {wr:>10} {mr:>9} {codes:>5}  {spike}")
    print()
    print("findings per tool (symptom @ onset step, severity; tool's own check name):")
    for r in result["tools"]:
        if not r.get("ran") or r["findings"] is None:
            continue
        items = [f"{f['symptom']} @ {f['step'] if f['step'] is None else int(f['step'])} "
                 f"({f['severity']}; {f['tool_check']})" for f in r["findings"]]
        print(f"  {r['tool']:<14} " + ("; ".join(items) if items else "(none)"))
    print()
    print(f"targets for trainmedic: wall <= {TARGET_RATIO:.0f}x the pyarrow process, peak RSS "
          f"<= {TARGET_RSS_MB:.0f} MB, names the spike")
    for name, verdict in result["verdicts"].items():
        print(f"  {name:<12} {verdict}")
    print(f"  load average at the end: {result['load_average_end']} "
          "(other work on the machine inflates wall times; CPU s is the child's own)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the log (default 1M)")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    ap.add_argument("--no-numpy-reader", action="store_true",
                    help="skip the extra trainmedic run with pyarrow's reader turned off")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    truth = _ensure_log(args.rows)
    tools = all_tools(variants=True)
    present = [t for t in tools if t.available()]
    result: dict = {
        "benchmark": "diagnose_1m", "machine": describe(), "input": truth,
        "repeats": args.repeats, "rss_floor_mb": floor_rss_mb(), "rss_method": RSS_METHOD,
        "tools": [],
    }
    runs, refs, phases = _measure(present, truth["path"], args.repeats, args.timeout,
                                  progress=sys.stderr.isatty(),
                                  numpy_reader=not args.no_numpy_reader)
    result["reference"] = None
    if refs:
        result["reference"] = {k: _median(refs, k)
                               for k in ("wall_s", "cpu_s", "import_s", "read_s")}
        result["reference"].update(pyarrow=refs[0]["pyarrow"], all=refs,
                                   peak_rss_mb_max=max(r["peak_rss_mb"] for r in refs))
    result["phases"] = _summarize_phases(phases)
    for tool in tools:
        if tool in present:
            result["tools"].append({"ran": True, **_summarize(tool, runs[tool.name], truth)})
        else:
            why = ("not installed: pip install -e . into .venv" if tool.name == "trainmedic"
                   else "not installed: see benchmarks/README.md (competitor venv .bench/venv)")
            result["tools"].append({"tool": tool.name, "ran": False, "reason": why})

        if tool.name == "trainmedic" and NUMPY_ROW in runs:
            row = _summarize(tool, runs[NUMPY_ROW], truth)
            result["tools"].append({"ran": True, **row, "tool": NUMPY_ROW})
    tm = next((r for r in result["tools"] if r["tool"] == "trainmedic" and r["ran"]), None)
    ref = result["reference"]
    verdicts: dict[str, str] = {}
    result["ratio_to_reference"] = None
    if tm is None or tm["output_problem"]:
        why = "trainmedic not installed" if tm is None else tm["output_problem"]
        verdicts = {"wall": f"FAIL ({why})", "peak RSS": "FAIL", "spike": "FAIL"}
    else:
        if ref is None:
            verdicts["wall"] = "FAIL (no reference: pyarrow is not installed in .venv)"
        else:
            ratio = tm["wall_s_median"] / ref["wall_s"]
            result["ratio_to_reference"] = ratio
            verdicts["wall"] = ("PASS" if ratio <= TARGET_RATIO else "FAIL") + \
                f" ({tm['wall_s_median']:.2f} s = {ratio:.2f}x the pyarrow process's " \
                f"{ref['wall_s']:.2f} s)"
        verdicts["peak RSS"] = ("PASS" if tm["peak_rss_mb_max"] <= TARGET_RSS_MB else "FAIL") + \
            f" ({tm['peak_rss_mb_max']:.0f} MB)"
        verdicts["spike"] = (f"PASS (step {tm['spike_step_named']:.0f})" if tm["spike_named"]
                             else "FAIL (no loss_spike finding near the onset)")
    result["verdicts"] = verdicts
    result["load_average_end"] = describe()["load_average"]

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_report(result)
    return 0 if all(v.startswith("PASS") for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
