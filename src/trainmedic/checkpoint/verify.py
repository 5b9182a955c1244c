"""Is this checkpoint intact, and which is the newest one that is?

:func:`verify` checks one checkpoint folder: the manifest is there and valid; every file it
lists exists with the listed size and content hash; every rank's ``train_state.rank{r}.pt``
is listed (when the save had training state); every ``.pt`` file loads with
``torch.load(weights_only=True)`` (no pickled code is ever run) and every floating tensor in it
is finite; for a ``dcp`` checkpoint, ``trainmedic.checkpoint.sharded.verify_sharded`` reads the
DCP metadata and records. :func:`latest` returns the newest committed checkpoint that verifies
(optionally skipping those saved at or after the onset of a divergence or a non-finite loss in
the run's telemetry); :func:`list_checkpoints` describes every checkpoint folder under a root.

Statuses: ``good``; ``damaged`` (something above failed; each problem names its file);
``uncommitted`` (a ``.tmp-*`` folder: a save in progress or one that never finished, or a
``.del-*`` folder being deleted); ``not_a_checkpoint`` (no manifest and not named like one).
``list_checkpoints`` also says ``writing`` for a ``.tmp-*`` folder whose writer is alive.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.checkpoint.commit import LOCK_NAME, parse_dir_name, scan, writer_alive, writer_info
from trainmedic.checkpoint.manifest import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    hash_file,
    read_manifest,
    train_state_name,
)
from trainmedic.errors import InputError, UnrecognizedInputError

__all__ = [
    "STATUSES",
    "Problem",
    "VerifyReport",
    "CheckpointInfo",
    "LatestResult",
    "verify",
    "latest",
    "find_latest",
    "list_checkpoints",
    "check_file",
    "load_pt",
    "owned_copy",
]

log = logging.getLogger(__name__)

STATUSES = ("good", "damaged", "uncommitted", "writing", "not_a_checkpoint", "after_divergence")


@dataclass(kw_only=True, frozen=True)
class Problem:
    """One thing wrong with a checkpoint."""

    file: str
    """The file it is about, relative to the checkpoint folder ("" for the folder)."""

    what: str
    """What is wrong, in one line."""

    def __str__(self) -> str:
        return f"{self.file}: {self.what}" if self.file else self.what


@dataclass(kw_only=True, frozen=True)
class VerifyReport:
    """The result of :func:`verify`."""

    path: Path
    """The checkpoint folder."""

    status: str
    """``good``, ``damaged``, ``uncommitted`` or ``not_a_checkpoint``."""

    step: int | None = None
    """The manifest's step (else the folder name's), None when neither says."""

    manifest: Manifest | None = None
    """The manifest, when it could be read."""

    problems: tuple[Problem, ...] = ()
    """Everything found wrong (empty when good)."""

    notes: tuple[str, ...] = ()
    """Things worth knowing that are not damage (files not in the manifest, checks skipped)."""

    bytes_hashed: int = 0
    """Bytes read and hashed."""

    tensors_checked: int = 0
    """Tensors of the ``.pt`` files loaded (``weights_only=True``) and checked for
    finiteness (a ``dcp`` checkpoint's shards are counted in ``dcp_tensors``)."""

    dcp_files: int | None = None
    """``dcp`` format: the DCP data files its ``.metadata`` names (None when not checked)."""

    dcp_tensors: int | None = None
    """``dcp`` format: the tensors its ``.metadata`` names, each checked chunk by chunk for
    shape, dtype and finiteness (None when not checked)."""

    quick: bool = False
    """True when only the manifest, the file list and the sizes were checked."""

    @property
    def ok(self) -> bool:
        return self.status == "good"

    def to_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "path": str(self.path), "status": self.status, "step": self.step,
            "world_size": m.world_size if m else None, "format": m.format if m else None,
            "files": len(m.files) if m else None, "size_bytes": m.size_bytes if m else None,
            "bytes_hashed": self.bytes_hashed, "tensors_checked": self.tensors_checked,
            "dcp_files": self.dcp_files, "dcp_tensors": self.dcp_tensors, "quick": self.quick,
            "problems": [{"file": p.file, "what": p.what} for p in self.problems],
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------- file checks
def check_file(folder: Path, rec: FileRecord, *, quick: bool = False) -> list[Problem]:
    """Presence, size and (unless ``quick``) content hash of one listed file."""
    path = folder / rec.path
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return [Problem(file=rec.path, what=f"missing (written by rank {rec.rank})")]
    except OSError as exc:
        return [Problem(file=rec.path, what=f"cannot be read: {exc.strerror}")]
    if size != rec.size_bytes:
        how = "truncated" if size < rec.size_bytes else "grew after the save"
        return [Problem(file=rec.path, what=f"{size} bytes, the manifest says "
                                           f"{rec.size_bytes} ({how})")]
    if quick:
        return []
    try:
        _, digest = hash_file(path)
    except OSError as exc:
        return [Problem(file=rec.path, what=f"cannot be read: {exc.strerror}")]
    if digest != rec.hash:
        return [Problem(file=rec.path, what=f"content hash {digest}, the manifest says "
                                           f"{rec.hash}: the file changed after the save")]
    return []


def _walk_tensors(obj: Any, where: str) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield where, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_tensors(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk_tensors(v, f"{where}[{i}]")


def _nonfinite(t: Any) -> int:
    """The number of NaN/inf values of a floating or complex tensor (0 otherwise)."""
    import torch

    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return 0
    if t.is_floating_point():
        try:
            # One reduction, no temporary: NaN propagates to both ends, inf shows at one.
            lo, hi = torch.aminmax(t.detach().reshape(-1))
            if bool(torch.isfinite(lo)) and bool(torch.isfinite(hi)):
                return 0
        except (RuntimeError, NotImplementedError):  # dtypes without aminmax (float8)
            pass
    return int((~torch.isfinite(t.detach())).sum())


def load_pt(path: Path, rel: str) -> tuple[Any, list[Problem], int]:
    """``torch.load(path, weights_only=True, mmap=True)`` and a finiteness check of every
    floating tensor: ``(object or None, problems, tensors checked)``.

    ``mmap=True`` maps the file instead of copying it: loading into a model copies each
    tensor once, from the page cache.
    """
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, [Problem(file=rel, what=f"refused by torch.load(weights_only=True): "
                                             f"{first[:200]}")], 0
    except Exception as exc:  # noqa: BLE001 - any failure to load is damage to report
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, [Problem(file=rel, what=f"does not load: {type(exc).__name__}: "
                                             f"{first[:200]}")], 0
    problems = []
    n = 0
    for where, t in _walk_tensors(obj, ""):
        n += 1
        bad = _nonfinite(t)
        if bad:
            problems.append(Problem(file=rel, what=f"tensor {where or '(top)'} holds {bad} "
                                                   f"non-finite value(s) (NaN/inf) of "
                                                   f"{t.numel()}"))
    return obj, problems, n


def owned_copy(obj: Any) -> Any:
    """A copy of a loaded structure whose tensors own their memory (not the file's map)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        out = type(obj)()
        for k, v in obj.items():
            out[k] = owned_copy(v)
        return out
    if isinstance(obj, list):
        return [owned_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(owned_copy(v) for v in obj)
    return obj


# ------------------------------------------------------------------------------- verify
def _not_checkpoint(path: Path, why: str) -> VerifyReport:
    return VerifyReport(path=path, status="not_a_checkpoint", notes=(why,))


def verify(path: str | Path, *, quick: bool = False) -> VerifyReport:
    """Check one checkpoint folder (module doc). ``quick``: manifest, file list and sizes
    only (no hashing, no loading).

    Raises ``InputError`` when ``path`` does not exist or is not a folder; everything else
    is in the report.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no such folder; expected a checkpoint folder (step-*)")
    if not path.is_dir():
        raise InputError(str(path), "not a folder; expected a checkpoint folder (step-*)")
    parsed = parse_dir_name(path.name)
    kind, name_step = parsed if parsed else (None, None)
    if kind == "tmp":
        info = writer_info(path) or {}
        why = (f"not committed: being written (pid {info.get('pid', '?')})"
               if writer_alive(path) else
               "not committed: a save that did not finish (its writer is gone)")
        return VerifyReport(path=path, status="uncommitted", step=name_step,
                            problems=(Problem(file="", what=why),))
    if kind == "deleting":
        return VerifyReport(path=path, status="uncommitted", step=name_step,
                            problems=(Problem(file="", what="being deleted by retention"),))
    try:
        manifest = read_manifest(path)
    except UnrecognizedInputError as exc:
        if kind is None:
            return _not_checkpoint(path, exc.message)
        return VerifyReport(path=path, status="damaged", step=name_step,
                            problems=(Problem(file=MANIFEST_NAME, what=exc.message),))
    except InputError as exc:
        if kind is None and not (path / MANIFEST_NAME).exists():
            return _not_checkpoint(path, "no manifest.json and not named step-*")
        return VerifyReport(path=path, status="damaged", step=name_step,
                            problems=(Problem(file=MANIFEST_NAME, what=exc.message),))

    problems: list[Problem] = []
    notes: list[str] = []
    if name_step is not None and name_step != manifest.step:
        problems.append(Problem(file="", what=f"the folder name says step {name_step}, the "
                                              f"manifest says {manifest.step}"))
    problems += _structure_problems(manifest)
    hashed = 0
    tensors = 0
    for rec in manifest.files:
        found = check_file(path, rec, quick=quick)
        problems += found
        if found or quick:
            continue
        hashed += rec.size_bytes
        if rec.path.endswith(".pt") and not rec.path.startswith("dcp/"):
            obj, probs, n = load_pt(path / rec.path, rec.path)
            del obj
            problems += probs
            tensors += n
    listed = {rec.path for rec in manifest.files} | {MANIFEST_NAME, LOCK_NAME}
    extra = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    extra = [e for e in extra if e not in listed]
    if extra:
        notes.append(f"not in the manifest (ignored): {', '.join(extra[:5])}"
                     + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""))
    dcp_files = dcp_tensors = None
    if manifest.format == "dcp" and not quick:
        try:
            from trainmedic.checkpoint.sharded import check_sharded
        except ImportError:
            notes.append("dcp/: DCP records not checked (trainmedic.checkpoint.sharded is not "
                         "available); their hashes were")
        else:
            found_dcp, counts = check_sharded(path / "dcp")
            problems += [Problem(file="dcp", what=p) for p in found_dcp]
            if counts is not None:
                dcp_files, dcp_tensors = counts.files, counts.tensors
    return VerifyReport(path=path, status="damaged" if problems else "good",
                        step=manifest.step, manifest=manifest, problems=tuple(problems),
                        notes=tuple(notes), bytes_hashed=hashed, tensors_checked=tensors,
                        dcp_files=dcp_files, dcp_tensors=dcp_tensors, quick=quick)


def _structure_problems(manifest: Manifest) -> list[Problem]:
    problems = []
    if manifest.train_state:
        for r in range(manifest.world_size):
            name = train_state_name(r)
            if manifest.file(name) is None:
                problems.append(Problem(file=name, what=f"not in the manifest: rank {r}'s "
                                                        f"training state was not saved"))
    listed = {rec.path for rec in manifest.files}
    for key, target in manifest.entries.items():
        if target not in listed and not any(p.startswith(target + "/") for p in listed):
            problems.append(Problem(file=target, what=f"holds {key!r} per the manifest, but "
                                                      f"no such file is listed"))
    return problems


# ------------------------------------------------------------------------ latest / list
@dataclass(kw_only=True, frozen=True)
class CheckpointInfo:
    """One checkpoint folder under a root, as :func:`list_checkpoints` describes it."""

    path: Path
    """The folder."""

    step: int
    """Its step (from the manifest when it could be read, else from the name)."""

    status: str
    """``good``, ``damaged``, ``uncommitted``, ``writing``, or ``after_divergence`` (good
    but saved at or after the onset of a divergence, in :func:`find_latest` with a run)."""

    size_bytes: int
    """Bytes on disk in the folder."""

    reason: str = ""
    """Why it is not good: the first problem (and how many more)."""

    created_utc: str = ""
    """The manifest's creation time, when there is one."""

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "step": self.step, "status": self.status,
                "size_bytes": self.size_bytes, "reason": self.reason,
                "created_utc": self.created_utc}


@dataclass(kw_only=True, frozen=True)
class LatestResult:
    """The answer of :func:`find_latest`, with what was passed over on the way."""

    path: Path | None
    """The newest checkpoint that verifies, or None."""

    step: int | None
    """Its step."""

    skipped: tuple[CheckpointInfo, ...] = ()
    """Newer folders that were not taken, newest first, each with its reason."""

    divergence_onset: int | None = None
    """The step where the run's loss diverged or went non-finite (with a run), else None."""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "trainmedic.ckpt-latest/1",
                "latest": str(self.path) if self.path else None, "step": self.step,
                "divergence_onset": self.divergence_onset,
                "skipped": [s.to_dict() for s in self.skipped]}


def _du(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _reason(report: VerifyReport) -> str:
    if not report.problems:
        return ""
    more = len(report.problems) - 1
    return str(report.problems[0]) + (f" (and {more} more)" if more else "")


def _info(report: VerifyReport, status: str | None = None, reason: str | None = None,
          ) -> CheckpointInfo:
    m = report.manifest
    return CheckpointInfo(path=report.path, step=report.step if report.step is not None else -1,
                          status=status or report.status, size_bytes=_du(report.path),
                          reason=_reason(report) if reason is None else reason,
                          created_utc=m.created_utc if m else "")


def find_latest(root: str | Path, *, onset: int | None = None,
                quick: bool = False) -> LatestResult:
    """The newest committed checkpoint under ``root`` that verifies, and the newer ones
    skipped (damaged, uncommitted, or saved at/after ``onset``, the step where the caller
    found the run diverged). Raises ``InputError`` when ``root`` is not a folder."""
    skipped: list[CheckpointInfo] = []
    for d in scan(root):
        if d.kind != "committed":
            if d.kind == "tmp":
                skipped.append(_info(verify(d.path), status=(
                    "writing" if writer_alive(d.path) else "uncommitted")))
            continue
        if onset is not None and d.step >= onset:
            skipped.append(CheckpointInfo(
                path=d.path, step=d.step, status="after_divergence", size_bytes=_du(d.path),
                reason=f"saved at or after step {onset}, where the run's loss diverged or "
                       f"went non-finite"))
            continue
        report = verify(d.path, quick=quick)
        if report.ok:
            return LatestResult(path=d.path, step=report.step, skipped=tuple(skipped),
                                divergence_onset=onset)
        # Not logged above debug: the caller reports ``skipped`` (``latest`` logs it once).
        log.debug("skipping %s: %s", d.path, _reason(report))
        skipped.append(_info(report))
    return LatestResult(path=None, step=None, skipped=tuple(skipped), divergence_onset=onset)


def latest(root: str | Path, *, onset: int | None = None) -> Path | None:
    """The newest committed checkpoint under ``root`` that verifies fully, or None; with
    ``onset`` (where the run diverged: ``trainmedic.diagnose.onset.divergence_onset``),
    checkpoints saved at or after it are skipped too. Each newer committed checkpoint that is
    damaged is logged once, as a warning."""
    result = find_latest(root, onset=onset)
    for s in result.skipped:
        if s.status == "damaged":
            log.warning("skipping damaged checkpoint %s: %s", s.path, s.reason)
    return result.path


def list_checkpoints(root: str | Path, *, quick: bool = False) -> list[CheckpointInfo]:
    """Every checkpoint folder under ``root`` (committed, temporary, being deleted), highest
    step first, each verified (``quick``: sizes only). Raises ``InputError`` when ``root``
    is not a folder."""
    out = []
    for d in scan(root):
        report = verify(d.path, quick=quick)
        status = None
        if d.kind == "tmp" and writer_alive(d.path):
            status = "writing"
        out.append(_info(report, status=status))
    return out

