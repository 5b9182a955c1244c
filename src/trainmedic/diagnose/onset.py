"""When a run stopped being trustworthy: the first step of a divergence or a non-finite loss
that ``trainmedic diagnose`` finds in it.

The checkpoint manager does not read runs itself (``checkpoint/`` never imports
``diagnose/``): it takes a ``trusted_before`` callable, and this is the one callers pass
(``trusted_before=lambda: divergence_onset(run_dir)``), as ``trainmedic ckpt latest --run``
and the demo do.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["divergence_onset", "UNTRUSTED_SYMPTOMS"]

#: A checkpoint saved at or after the onset of one of these holds a broken model.
UNTRUSTED_SYMPTOMS = frozenset({"divergence", "nonfinite_loss"})


def divergence_onset(run_dir: str | Path) -> int | None:
    """The first step of a divergence or a non-finite loss in the run at ``run_dir`` (its store
    or logs), else None. Raises ``InputError`` on an unreadable run."""
    from trainmedic.diagnose.engine import diagnose
    from trainmedic.run import load_run

    found = diagnose(load_run(str(run_dir)), only=set(UNTRUSTED_SYMPTOMS))
    onsets = [f.onset_step for f in found.findings
              if f.symptom in UNTRUSTED_SYMPTOMS and f.onset_step is not None]
    return min(onsets) if onsets else None
