"""Score ``trainmedic diagnose`` on the labelled public dev logs (``shared/dev-logs``).

Usage (from the repository root)::

    .venv/bin/python benchmarks/corpus/score_devlogs.py [--logs DIR] [--details] [--json]

Each labelled folder of ``expected.json`` is read with ``load_run`` and diagnosed in process;
the findings are scored with ``scoring.py`` (the rule in ``expected.json``'s ``_rule``). A log
trainmedic cannot read scores as no findings (every fault missed). Prints per-run hits,
misses and false positives, then recall, precision and healthy runs flagged, per symptom.
These logs belong to the never-tuned split: report the score, do not tune on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from scoring import format_totals, load_labels, score_run, total  # noqa: E402

DEFAULT_LOGS = HERE.parents[2] / "shared" / "dev-logs"


def diagnose_path(path: Path) -> tuple[list[tuple[str, str, float | None]], float | None, str]:
    from trainmedic.diagnose import diagnose
    from trainmedic.errors import TrainmedicError
    from trainmedic.run import load_run

    try:
        run = load_run(str(path))
    except TrainmedicError as e:
        return [], None, f"unreadable: {e}"
    d = diagnose(run)
    steps = [int(s.steps.min()) for s in run.series.values() if len(s)]
    last = run.last_step()
    span = (last - min(steps)) if steps and last is not None else None
    return [(f.symptom, f.severity, f.onset_step) for f in d.findings], span, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--details", action="store_true", help="print every run, not only misses")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--split", help="only the logs of this split (a 'split' in the labels)")
    args = ap.parse_args(argv)
    exp = args.logs / "expected.json"
    if not exp.exists() and (args.logs / "labels.json").exists():
        exp = args.logs / "labels.json"  # a set laid out like benchmarks/public2
    if not exp.exists():
        print(f"no labels at {exp}; nothing to score")
        return 0
    labels = load_labels(exp)
    scores = []
    t0 = time.perf_counter()
    for name, label in sorted(labels.items()):
        if name.startswith("_") or (args.split and label.get("split") != args.split):
            continue
        found, span, err = diagnose_path(args.logs / name)
        rs = score_run(name, label, found, span)
        scores.append(rs)
        if args.details or rs.missed or rs.false or err:
            loud = [f"{s}/{v}@{o}" for s, v, o in found if v in ("warning", "error")]
            print(f"{name}: hits {rs.hits}/{rs.faults} missed {rs.missed} false {rs.false}"
                  f"{'  ' + err[:120] if err else ''}\n    loud: {loud}")
    t = total(scores)
    title = args.logs.name + (f" {args.split}" if args.split else "")
    print(format_totals(t, f"{title} ({len(scores)} labelled runs)"))
    print(f"scored in {time.perf_counter() - t0:.1f} s")
    if args.json:
        print(json.dumps({"recall": t.recall, "precision": t.precision,
                          "healthy_flagged": t.healthy_flagged, "healthy": t.healthy}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
