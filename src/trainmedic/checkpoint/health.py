"""Which checkpoints can be trusted to resume from, as retention and ``latest()`` judge it
without reading them in full.

At save the manager records in the manifest whether the state's floating tensors were finite
(:func:`state_finite`: one ``aminmax`` reduction per tensor, ~10 ms per 0.5 GB on the
benchmark VM, so cheap beside the write). A run that went NaN keeps saving: with
``keep_last=3`` its last three checkpoints would all hold NaN weights and retention would
have deleted every good one. So retention also keeps :func:`newest_trusted`: the newest
committed checkpoint not known to be non-finite and, when the manager was given a
``trusted_before`` callable (``trainmedic.diagnose.onset.divergence_onset`` of the run),
saved before the step it returns (what ``trainmedic ckpt latest --run`` skips), however old
it is. This package does not read runs itself: it never imports ``diagnose/``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainmedic.checkpoint.commit import scan
from trainmedic.checkpoint.manifest import read_manifest
from trainmedic.errors import InputError

__all__ = ["state_finite", "newest_trusted", "onset_of"]

log = logging.getLogger(__name__)


def state_finite(objs: Mapping[str, Any], step: int, root: str | Path) -> bool:
    """True when every floating tensor in ``objs`` (state key -> state dict, of checkpoint
    ``step`` under ``root``) is finite; False, with a warning naming one, when one is not."""
    from trainmedic.checkpoint.verify import _nonfinite, _walk_tensors

    bad = [where for key, obj in objs.items()
           for where, t in _walk_tensors(obj, key) if _nonfinite(t)]
    if bad:
        log.warning("checkpoint step %d under %s holds NaN/inf values (%d tensors, first %s): "
                    "it is saved, but latest() skips it and retention keeps the newest "
                    "finite checkpoint", step, root, len(bad), bad[0])
    return not bad


def onset_of(trusted_before: Callable[[], int | None] | None) -> int | None:
    """What ``trusted_before`` says (the step from which checkpoints are not trusted), or None
    without one, or when it cannot read the run yet (a fresh run: no divergence)."""
    if trusted_before is None:
        return None
    try:
        return trusted_before()
    except InputError as exc:
        log.debug("no divergence check: %s", exc)
        return None


def newest_trusted(root: str | Path, onset: int | None = None) -> Path | None:
    """The newest committed checkpoint under ``root`` whose manifest reads, is not known to
    hold non-finite values, and (``onset``) was saved before that step; None if none."""
    for d in scan(root):
        if d.kind != "committed" or (onset is not None and d.step >= onset):
            continue
        try:
            manifest = read_manifest(d.path)
        except InputError:
            continue
        if manifest.finite is not False:
            return d.path
    return None
