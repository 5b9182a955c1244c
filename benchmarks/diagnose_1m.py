"""`trainmedic diagnose` against runmedic and losslint on a 1,000,000-step CSV, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/diagnose_1m.py              # 1M rows, 3 timed runs per tool
    .venv/bin/python benchmarks/diagnose_1m.py --rows 100000 --repeats 5
    .venv/bin/python benchmarks/diagnose_1m.py --json > result.json

The input (see synthetic_log.py) is generated once, in a separate process, and cached under
.bench/data/. Each tool then runs as a subprocess on the same file: one warm-up run each, then
``--repeats`` rounds that run every tool once per round (interleaved, so drift in the machine
hits all tools alike). For each tool: median wall time, peak RSS of that child (os.wait4),
exit code, and whether its output names the injected loss spike and at which step.

Targets (issue 2, "Performance"): trainmedic at most 1.0 s wall and 300 MB peak RSS on a 2-core
machine. The competitors are optional: without .bench/venv their rows say "not installed".
"""

from __future__ import annotations

import argparse
import json
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

TARGET_WALL_S = 1.0
TARGET_RSS_MB = 300.0
SPIKE_TOLERANCE_STEPS = 50
"""A spike finding counts when it names a step from onset - this to recovery + this."""


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


def _measure(tools: list[Tool], path: str, repeats: int, timeout_s: float,
             progress: bool) -> dict[str, list[Measurement]]:
    runs: dict[str, list[Measurement]] = {t.name: [] for t in tools}
    for round_no in range(repeats + 1):  # round 0 is the warm-up, not kept
        for tool in tools:
            m = run_measured(tool.argv(path), timeout_s=timeout_s)
            if progress:
                label = "warm-up" if round_no == 0 else f"run {round_no}/{repeats}"
                print(f"  {tool.name:<14} {label:<9} {m.wall_s:7.2f} s {m.peak_rss_mb:7.0f} MB "
                      f"exit {m.exit_code}", file=sys.stderr)
            if round_no > 0:
                runs[tool.name].append(m)
    return runs


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
    print(f"timing: median of {result['repeats']} runs after 1 warm-up, tools interleaved; "
          f"peak RSS = max over those runs of the child's own ru_maxrss ("
          f"{result['rss_method']}; /bin/true reads {result['rss_floor_mb']:.1f} MB)")
    print()
    tm = next((r for r in result["tools"] if r["tool"] == "trainmedic" and r.get("ran")), None)
    ok_tm = tm is not None and tm["exit_codes"] and all(c in (0, 1) for c in tm["exit_codes"])
    head = (f"{'tool':<14} {'version':<8} {'wall s (median)':>15} {'min-max':>13} {'CPU s':>6} "
            f"{'peak RSS MB':>11} {'wall vs tm':>10} {'RSS vs tm':>9} {'exit':>5}  spike named?")
    print(head)
    print("-" * len(head))
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
    print(f"targets for trainmedic: wall <= {TARGET_WALL_S} s, peak RSS <= {TARGET_RSS_MB:.0f} MB, "
          "names the spike")
    for name, verdict in result["verdicts"].items():
        print(f"  {name:<12} {verdict}")
    print(f"  load average at the end: {result['load_average_end']} "
          "(other work on the machine inflates wall times; CPU s is the child's own)")
    if result["machine"]["cores_usable"] != 2:
        print(f"  note: the targets are for a 2-core machine; this one has "
              f"{result['machine']['cores_usable']} usable cores")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the log (default 1M)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per tool (default 3)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
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
    runs = _measure(present, truth["path"], args.repeats, args.timeout,
                    progress=sys.stderr.isatty())
    for tool in tools:
        if tool in present:
            result["tools"].append({"ran": True, **_summarize(tool, runs[tool.name], truth)})
        else:
            why = ("not installed: pip install -e . into .venv" if tool.name == "trainmedic"
                   else "not installed: see benchmarks/README.md (competitor venv .bench/venv)")
            result["tools"].append({"tool": tool.name, "ran": False, "reason": why})

    tm = next((r for r in result["tools"] if r["tool"] == "trainmedic" and r["ran"]), None)
    verdicts: dict[str, str] = {}
    if tm is None or tm["output_problem"]:
        why = "trainmedic not installed" if tm is None else tm["output_problem"]
        verdicts = {"wall": f"FAIL ({why})", "peak RSS": "FAIL", "spike": "FAIL"}
    else:
        verdicts["wall"] = ("PASS" if tm["wall_s_median"] <= TARGET_WALL_S else "FAIL") + \
            f" ({tm['wall_s_median']:.2f} s)"
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
