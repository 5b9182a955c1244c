"""Score ``trainmedic diagnose`` on the trained corpus (``benchmarks/corpus/runs``).

Usage (from the repository root)::

    .venv/bin/python benchmarks/corpus/score_corpus.py [--split tune|holdout|all] [--details]
                                                       [--json] [--only NAME,...]
    .venv/bin/python benchmarks/corpus/score_corpus.py --root benchmarks/indep --split B

Each run of ``labels.json`` in the chosen split is read with ``load_run`` and diagnosed in
process; the findings are scored with ``scoring.py`` (the rule in ``labels.json``'s ``_rule``,
the same as ``shared/dev-logs/expected.json``). A log trainmedic cannot read scores as no
findings (every fault missed). Prints the runs with misses or false positives (every run with
``--details``), then recall, precision, healthy runs flagged and a per-symptom table, per split.
The ``holdout`` split is the one nobody tunes on: report it, do not tune on it.
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

from score_devlogs import diagnose_path  # noqa: E402
from scoring import format_totals, load_labels, score_run, total  # noqa: E402

RUNS = HERE / "runs"
LABELS = HERE / "labels.json"


def score_split(labels: dict, split: str, details: bool = False, out=print,
                runs: Path = RUNS):
    scores = []
    for name, label in sorted(labels.items()):
        if split != "all" and label.get("split") != split:
            continue
        found, span, err = diagnose_path(runs / name)
        rs = score_run(name, label, found, span)
        scores.append(rs)
        if details or rs.missed or rs.false or err:
            loud = [f"{s}/{v}@{o}" for s, v, o in found if v in ("warning", "error")]
            out(f"{name}: hits {rs.hits}/{rs.faults} missed {rs.missed} false {rs.false}"
                f"{'  ' + err[:120] if err else ''}\n    loud: {loud}")
    return scores


def main(argv: list[str] | None = None) -> int:
    from machine import one_line

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE,
                    help="a corpus folder holding runs/ and labels.json (default: this one)")
    ap.add_argument("--split", default="all",
                    help="a split named in labels.json (tune, holdout, holdout2 here), or "
                         "'all': each split separately, then together")
    ap.add_argument("--details", action="store_true", help="print every run, not only misses")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print(one_line())
    labels = load_labels(args.root / "labels.json")
    if args.only:
        want = set(args.only.split(","))
        labels = {k: v for k, v in labels.items() if k in want}
    t0 = time.perf_counter()
    splits = sorted({str(v.get("split")) for v in labels.values()}) if args.split == "all" \
        else [args.split]
    results = {}
    every = []
    for sp in splits:
        print(f"--- {sp} ---")
        scores = score_split(labels, sp, args.details, runs=args.root / "runs")
        every += scores
        results[sp] = total(scores)
    for sp in splits:
        n = sum(1 for v in labels.values() if v.get("split") == sp)
        print(format_totals(results[sp], f"corpus {sp} ({n} runs)"))
    if len(splits) > 1:
        print(format_totals(total(every), f"corpus all ({len(every)} runs)"))
    print(f"scored in {time.perf_counter() - t0:.1f} s")
    if args.json:
        print(json.dumps({sp: {"recall": t.recall, "precision": t.precision,
                               "healthy_flagged": t.healthy_flagged, "healthy": t.healthy}
                          for sp, t in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
