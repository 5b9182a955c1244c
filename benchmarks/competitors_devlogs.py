"""What runmedic and losslint (and trainmedic) report on real public logs, scored against labels.

Usage (from the repository root)::

    .venv/bin/python benchmarks/competitors_devlogs.py                 # all files, all tools
    .venv/bin/python benchmarks/competitors_devlogs.py --details       # + every finding's text
    .venv/bin/python benchmarks/competitors_devlogs.py --skip-1m --json

Inputs: the 12 public logs of the development set (``--logs``, default /work/shared/dev-logs;
SOURCES.md there says what each file shows), the 1M-step synthetic CSV of diagnose_1m.py, and
two labelled synthetic probes (probe_logs.py). Each tool runs once per file as a subprocess.

For every file and tool it prints the findings (symptom @ onset step, severity), then per tool:
which labelled problems it finds (at the right step or not), false alarms (warning or above
on a symptom the data does not show), crashes, and causes it asserts that the file's own LR
series contradicts. Labels come from SOURCES.md's descriptions; they are written down in
CASES below, each with the reason.

Needs the competitor venv (.bench/venv, see benchmarks/README.md): without it, and without the
dev logs, the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from child_process import run_measured  # noqa: E402
from diagnosers import COMPETITOR_VENV, SEVERITY_RANK, Tool, ToolFinding, all_tools  # noqa: E402
from machine import describe, one_line  # noqa: E402
from probe_logs import write_all as write_probes  # noqa: E402

REPO = HERE.parent
DEFAULT_LOGS = Path("/work/shared/dev-logs")


@dataclass(kw_only=True, frozen=True)
class Expect:
    """A labelled problem: a tool finds it with one of ``symptoms`` naming a step in [lo, hi]."""

    label: str
    symptoms: frozenset[str]
    lo: float | None = None
    hi: float | None = None


@dataclass(kw_only=True, frozen=True)
class Case:
    name: str
    relpath: str
    truth: str
    expect: tuple[Expect, ...] = ()
    allowed: frozenset[str] = frozenset()
    """Symptoms the data really shows but that are not the labelled problem: no false alarm."""
    base: str = "logs"
    """``logs`` (the dev-log folder), ``abs`` (relpath is absolute: generated files)."""

    @property
    def clean(self) -> bool:
        return not self.expect


NONFINITE = frozenset({"nonfinite_loss", "nonfinite_grad", "nan_masked_in_logs"})

# Labels from SOURCES.md ("Problem cases" / "Clean cases" and the per-file numbers).
CASES: tuple[Case, ...] = (
    Case(name="hf-cpt-rouge", relpath="hf-cpt-rouge/trainer_state.json",
         truth="mild eval_loss upturn: min 0.4853 at 3294, 0.4917 at 5490",
         expect=(Expect(label="overfitting (mild) from 3294", symptoms=frozenset({"overfitting"}),
                        lo=3294 - 549, hi=3294 + 549),)),
    Case(name="hf-ner-overfit", relpath="hf-ner-overfit/trainer_state.json",
         truth="eval_loss min 0.5089 at 5600, rises to 1.2323 at 27990",
         expect=(Expect(label="overfitting from 5600", symptoms=frozenset({"overfitting"}),
                        lo=5600 - 2800, hi=5600 + 2800),)),
    Case(name="hf-t5-noeval", relpath="hf-t5-noeval/trainer_state.json",
         truth="grad_norm spikes 35.6 at 190000, 13.2 at 164000 (median 2.42), loss unaffected",
         expect=(Expect(label="grad-norm spikes at 164000/190000",
                        symptoms=frozenset({"exploding_gradients"}), lo=163500, hi=190500),)),
    Case(name="hf-spam-dense-eval", relpath="hf-spam-dense-eval/trainer_state.json",
         truth="clean: eval_loss falls at every eval; 3 train rows only"),
    Case(name="hf-qa-chance", relpath="hf-qa-chance/trainer_state.json",
         truth="no learning: eval_loss 1.3856-1.3863 (ln 4) for 20 epochs",
         expect=(Expect(label="flat loss from the start",
                        symptoms=frozenset({"flat_loss", "plateau"})),),
         allowed=frozenset({"plateau", "flat_loss"})),
    Case(name="pl-slm", relpath="pl-slm/metrics.csv",
         truth="clean: val_loss falls every epoch 4.13 -> 3.57"),
    Case(name="pl-pendulum-spike", relpath="pl-pendulum-spike/metrics.csv",
         truth="loss spike 0.05 -> 125.8 at step 16149 (epoch row 16190), recovers next row",
         expect=(Expect(label="loss spike at 16149", symptoms=frozenset({"loss_spike"}),
                        lo=16149 - 100, hi=16190 + 50),),
         allowed=frozenset({"loss_spike"})),  # the smaller excursion near 30680 is real too
    Case(name="pl-pinn-nan", relpath="pl-pinn-nan/metrics.csv",
         truth="every loss NaN from step 218 (loss fell from 2.9e12 before)",
         expect=(Expect(label="NaN from 218", symptoms=NONFINITE, lo=218, hi=218),)),
    Case(name="yolo-fire", relpath="yolo-fire/results.csv",
         truth="clean: train losses fall; val metrics noisy; last epoch best mAP50-95"),
    Case(name="yolo-weed-earlystop", relpath="yolo-weed-earlystop/results.csv",
         truth="val/box_loss min at epoch 3, 1.24-1.51 after; train loss keeps falling",
         expect=(Expect(label="overfitting from epoch 3", symptoms=frozenset({"overfitting"}),
                        lo=2, hi=4),)),
    Case(name="d2-waste", relpath="d2-waste/metrics.json",
         truth="clean: total_loss 2.73 -> ~1.0, flat after lr drop at 1519",
         allowed=frozenset({"plateau"})),
    Case(name="d2-dup-iter", relpath="d2-dup-iter/metrics.json",
         truth="clean short run; iteration 19 logged twice; lr still in warm-up at the end",
         allowed=frozenset({"resume_discontinuity"})),
)


def _extra_cases(skip_1m: bool) -> list[Case]:
    cases: list[Case] = []
    for probe in write_probes(REPO / ".bench" / "data" / "probes"):
        lo = probe.nan_onset_step - 10
        cases.append(Case(name=probe.name, relpath=str(probe.path), base="abs",
                          truth="SYNTHETIC: " + probe.truth,
                          expect=(Expect(label=f"NaN from {probe.nan_onset_step}",
                                         symptoms=NONFINITE, lo=lo,
                                         hi=probe.first_visible_step),)))
    if not skip_1m:
        gen = subprocess.run([sys.executable, str(HERE / "synthetic_log.py"), "1000000"],
                             capture_output=True, text=True, check=False)
        if gen.returncode == 0:
            info = json.loads(gen.stdout.strip().splitlines()[-1])
            sp = info["spike"]
            cases.append(Case(
                name="synthetic 1M", relpath=info["path"], base="abs",
                truth=f"SYNTHETIC: healthy 1M steps + loss spike {sp['peak_factor']}x at "
                      f"{sp['onset_step']}, recovered by {sp['recovered_step']}",
                expect=(Expect(label=f"loss spike at {sp['onset_step']}",
                               symptoms=frozenset({"loss_spike"}), lo=sp["onset_step"] - 50,
                               hi=sp["recovered_step"] + 50),),
                allowed=frozenset({"exploding_gradients"})))  # grad_norm spikes 25x there
        else:
            print(f"note: could not generate the 1M-row log: {gen.stderr.strip()[-200:]}",
                  file=sys.stderr)
    return cases


# ------------------------------------------------------------------ the file's own LR series

_STEP_KEYS = ("step", "global_step", "iteration", "iter", "epoch")
_LR_KEY = re.compile(r"(^|[^a-z])(lr|learning_rate)([^a-z]|$)", re.I)


def _num(v: object) -> float | None:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def lr_series(path: Path) -> list[tuple[float, float]]:
    """(step, lr) pairs from a CSV, JSONL or trainer_state.json, sorted by step; [] if none.

    Only used to check the causes the tools assert about the LR.
    """
    rows: list[dict] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".csv":
        rows = [{k.strip(): v for k, v in r.items() if k} for r in
                csv.DictReader(text.splitlines())]
    else:
        try:
            doc = json.loads(text)
            rows = doc.get("log_history", []) if isinstance(doc, dict) else []
        except ValueError:
            for line in text.splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    out = []
    for r in rows:
        if not isinstance(r, dict):
            continue
        step = next((_num(r[k]) for k in _STEP_KEYS if k in r and _num(r[k]) is not None), None)
        lr_key = next((k for k in r if _LR_KEY.search(k)), None)
        lr = _num(r.get(lr_key)) if lr_key else None
        if step is not None and lr is not None and lr == lr:
            out.append((step, lr))
    return sorted(out)


def _tier(text: str, match: re.Match[str]) -> str:
    """``asserted`` (stated about this run), ``listed`` (one of several, after an "or") or
    ``marked unchecked`` (trainmedic's ``checked_against_data: false``)."""
    before = text[max(0, match.start() - 12): match.start()]
    after = text[match.end(): match.end() + 80].split(" / ", 1)[0]
    if "(unchecked)" in after:
        return "marked unchecked by the tool"
    return "listed as a possible cause" if re.search(r"\bor\s*$", before) else "asserted"


def contradicted_causes(f: ToolFinding, lr: list[tuple[float, float]]) -> list[str]:
    """Claims about the LR in ``f`` that the LR series refutes (empty when lr is unknown).

    Each is tagged ``asserted`` (said of this run) or ``listed as a possible cause`` (a
    generic cause in a list, after an "or", that the tool could have checked and did not).
    """
    if not lr:
        return []
    text = f.detail.lower()
    at = f.step if f.step is not None else lr[-1][0]
    peak = max(v for _, v in lr)
    out = []
    m = re.search(r"still rising|never stops increasing|warmup that never ends", text)
    if m:
        # How long had the LR been flat (within 1%) when the tool says it was rising?
        pts = [(s, v) for s, v in lr if s <= at]
        if len(pts) >= 3:
            ref = pts[-1][1]
            i = len(pts) - 1
            while i > 0 and abs(pts[i - 1][1] - ref) <= 0.01 * ref:
                i -= 1
            flat = len(pts) - i
            if flat >= 3 and flat >= 0.1 * len(pts):
                out.append(f"[{_tier(text, m)}] the LR was still rising at step {at:.0f}; lr "
                           f"had been flat at {ref:.3g} since step {pts[i][0]:.0f} "
                           f"({flat} logged points)")
    m = re.search(r"constant lr|decays too late|not decayed|never decayed|no lr decay", text)
    if m and f.symptom != "plateau":
        end = lr[-1][1]
        if end < 0.5 * peak:
            out.append(f"[{_tier(text, m)}] a constant LR / late decay; lr decayed from "
                       f"{peak:.3g} to {end:.3g}")
    m = re.search(r"no warmup|missing warmup|starts at its peak", text)
    if m and lr[0][1] < 0.5 * peak:
        out.append(f"[{_tier(text, m)}] no warm-up; lr starts at {lr[0][1]:.3g}, "
                   f"peak {peak:.3g}")
    return out


# ------------------------------------------------------------------ scoring


@dataclass(kw_only=True)
class Cell:
    """One tool on one file."""

    tool: str
    exit_code: int
    wall_s: float
    crash: str | None = None
    findings: list[ToolFinding] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    wrong_step: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)
    info_noise: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)


def _short(f: ToolFinding) -> str:
    step = "-" if f.step is None else f"{f.step:.0f}"
    sev = {"error": "E", "warning": "W", "info": "i"}.get(f.severity, f.severity)
    return f"{f.symptom}@{step}({sev})"


def score(case: Case, tool: Tool, path: Path, lr: list[tuple[float, float]]) -> Cell:
    m = run_measured(tool.argv(str(path)), timeout_s=600)
    cell = Cell(tool=tool.name, exit_code=m.exit_code, wall_s=m.wall_s)
    last = next((ln for ln in reversed(m.stderr.strip().splitlines()) if ln.strip()), "")
    kind = "traceback" if "Traceback (most recent call last)" in m.stderr else "error"
    if m.exit_code not in (0, 1):
        cell.crash = f"{kind}, exit {m.exit_code}: {last[:100]}"
    try:
        cell.findings = tool.parse(m.stdout)
    except (ValueError, KeyError, TypeError, AttributeError):
        cell.crash = cell.crash or f"{kind}, exit {m.exit_code}, no report: {last[:100]}"
    if cell.crash:
        cell.misses = [e.label for e in case.expect]
        return cell
    expected_syms = set(case.allowed).union(*(e.symptoms for e in case.expect))
    for e in case.expect:
        cands = [f for f in cell.findings if f.symptom in e.symptoms]
        if not cands:
            cell.misses.append(e.label)
            continue
        if e.lo is None or e.hi is None:
            cell.hits.append(e.label)
            continue
        good = [f for f in cands
                if any(e.lo <= s <= e.hi for s in [f.step, *f.steps] if s is not None)]
        if good:
            at = next(s for s in [good[0].step, *good[0].steps]
                      if s is not None and e.lo <= s <= e.hi)
            cell.hits.append(f"{e.label} (named {at:.0f})")
        else:
            named = ", ".join(_short(f) for f in cands[:3])
            cell.wrong_step.append(f"{e.label}: named {named}")
    for f in cell.findings:
        if f.symptom in expected_syms:
            continue
        if SEVERITY_RANK.get(f.severity, 0) >= SEVERITY_RANK["warning"]:
            cell.false_alarms.append(_short(f))
        else:
            cell.info_noise.append(_short(f))
        # a finding on a symptom the data does not show
    for f in cell.findings:
        cell.contradictions += [f"{_short(f)}: {c}" for c in contradicted_causes(f, lr)]
    return cell


def _verdict(case: Case, c: Cell) -> str:
    if c.crash:
        return "NO REPORT (" + c.crash + ")"
    parts = [", ".join(_short(f) for f in c.findings) or "(nothing)"]
    tags = []
    if case.expect:
        tags.append("HIT" if not c.misses and not c.wrong_step else
                    ("WRONG STEP" if c.wrong_step and not c.misses else "MISS"))
    if c.false_alarms:
        tags.append("FALSE ALARM")
    if c.contradictions:
        tags.append("CONTRADICTED CAUSE")
    return parts[0] + (f"  [{' / '.join(tags)}]" if tags else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS, help="the dev-log folder")
    ap.add_argument("--skip-1m", action="store_true", help="leave out the 1M-row CSV")
    ap.add_argument("--details", action="store_true", help="print every finding's text")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = ap.parse_args(argv)

    if not (COMPETITOR_VENV / "bin" / "runmedic").is_file() and \
            not (COMPETITOR_VENV / "bin" / "losslint").is_file():
        print(f"competitors_devlogs: skipped: no competitor venv at {COMPETITOR_VENV} "
              "(create it as benchmarks/README.md says)")
        return 0
    if not args.logs.is_dir():
        print(f"competitors_devlogs: skipped: dev-log folder {args.logs} not found (--logs DIR)")
        return 0

    tools = [t for t in all_tools() if t.available()]
    cases = list(CASES) + _extra_cases(args.skip_1m)
    table: list[tuple[Case, list[Cell]]] = []
    for case in cases:
        path = Path(case.relpath) if case.base == "abs" else args.logs / case.relpath
        if not path.is_file():
            print(f"note: {path} missing, skipped", file=sys.stderr)
            continue
        lr = lr_series(path)
        table.append((case, [score(case, t, path, lr) for t in tools]))

    if args.json:
        print(json.dumps({
            "benchmark": "competitors_devlogs", "machine": describe(),
            "tools": {t.name: t.version() for t in tools},
            "files": [{"case": asdict(c) | {"expect": [asdict(e) | {"symptoms": sorted(
                e.symptoms)} for e in c.expect], "allowed": sorted(c.allowed)},
                "cells": [asdict(cell) for cell in cells]} for c, cells in table],
        }, indent=2, default=str))
        return 0

    print(one_line())
    print("tools: " + ", ".join(f"{t.name} {t.version()}" for t in tools))
    print("cell: symptom@onset(severity E/W/i) per finding, mapped to trainmedic's codes; "
          "[HIT/MISS/WRONG STEP] against the label, FALSE ALARM = warning+ on a symptom the "
          "data does not show")
    for case, cells in table:
        print(f"\n{case.name}  --  {case.truth}")
        for c in cells:
            print(f"  {c.tool:<11} {c.wall_s:6.2f}s  {_verdict(case, c)}")
            if args.details:
                for f in c.findings:
                    print(f"      {_short(f)}: {f.detail[:400]}")
            for x in c.hits + c.wrong_step:
                print(f"      label: {x}")
            for x in c.contradictions:
                print(f"      contradicted: {x}")

    print("\nsummary per tool")
    n_prob = sum(1 for c, _ in table if c.expect)
    n_clean = sum(1 for c, _ in table if c.clean)
    for i, t in enumerate(tools):
        per_file = [(case, cs[i]) for case, cs in table]
        hits = sum(1 for case, c in per_file if case.expect and not c.misses and not c.wrong_step)
        wrong = [f"{case.name}" for case, c in per_file if c.wrong_step and not c.misses]
        missed = [f"{case.name}" for case, c in per_file if c.misses]
        fa_clean = [f"{case.name}: {', '.join(c.false_alarms)}" for case, c in per_file
                    if case.clean and c.false_alarms]
        fa_prob = [f"{case.name}: {', '.join(c.false_alarms)}" for case, c in per_file
                   if case.expect and c.false_alarms]
        crashes = [f"{case.name} ({(c.crash or '')[:70]})" for case, c in per_file if c.crash]
        infos = [f"{case.name}: {', '.join(c.info_noise)}" for case, c in per_file
                 if c.info_noise]
        contra = [f"{case.name}: {x}" for case, c in per_file for x in c.contradictions]
        print(f"\n{t.name}: labelled problems found at the right step: {hits}/{n_prob}")
        print(f"  wrong step: {wrong or '-'}")
        print(f"  missed (incl. crashes): {missed or '-'}")
        print(f"  false alarms on the {n_clean} clean files: {fa_clean or '-'}")
        print(f"  extra warning+ findings on problem files: {fa_prob or '-'}")
        print(f"  info-level findings on other symptoms: {infos or '-'}")
        print(f"  no report (crash or refused input): {crashes or '-'}")
        print(f"  causes contradicted by the file's LR: {contra or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
