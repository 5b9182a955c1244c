"""Score ``trainmedic diagnose`` on every never-tuned split at once: one line per split, then
the pooled totals and the pooled per-symptom table. Only totals are printed (never a run's
name or findings), so the splits stay unseen by whoever reads the output.

A split is never tuned when its runs were never opened by the developers: the house corpus's
``holdout``/``holdout2`` and the second half of every independent set (``benchmarks/indep*``,
``benchmarks/public*``), as each set's README says. Run from the repository root:

    .venv/bin/python benchmarks/corpus/score_never_tuned.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from score_devlogs import diagnose_path  # noqa: E402
from scoring import format_totals, load_labels, score_run, total  # noqa: E402

BENCH = HERE.parent
#: (folder under benchmarks/, its never-tuned split). The first half of each set is analysed.
NEVER_TUNED = (
    ("corpus", "holdout"), ("corpus", "holdout2"),
    ("indep", "B"), ("indep2", "D"), ("indep3", "F"), ("indep4", "H"), ("indep5", "J"),
    ("indep6", "L"), ("indep7", "I7b"), ("indep8", "I8b"), ("indep9", "I9b"), ("indep10", "I10b"), ("indep11", "I11b"),
    ("indep12", "I12b"), ("indep13", "I13b"), ("indep14", "I14b"),
    ("public2", "Q"), ("public3", "S"), ("public4", "U"), ("public5", "W"), ("public6", "Y"),
    ("public7", "N"), ("public8", "P8b"), ("public9", "P9b"), ("public10", "P10b"), ("public11", "P11b"), ("public12", "P12b"),
    ("public13", "P13b"),
)


def _runs_dir(folder: Path) -> Path:
    return folder / "runs" if (folder / "runs").is_dir() else folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    from machine import one_line

    print(one_line())
    every = []
    for name, split in NEVER_TUNED:
        folder = BENCH / name
        if not (folder / "labels.json").exists():
            continue  # a set not built in this checkout
        labels = load_labels(folder / "labels.json")
        runs = _runs_dir(folder)
        scores = []
        for run, label in sorted(labels.items()):
            if label.get("split") != split:
                continue
            found, span, _err = diagnose_path(runs / run)
            scores.append(score_run(run, label, found, span))
        every.extend(scores)
        print(format_totals(total(scores), f"{name} {split} ({len(scores)} runs)")
              .splitlines()[0])
    print()
    print(format_totals(total(every), f"pooled never-tuned ({len(every)} runs)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
