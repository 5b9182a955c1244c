"""Merging the tables of one run: one copy of a metric logged twice, checkpoint copies of an
HF trainer_state.json dropped, a console log beside the file extracted from it read once."""

from __future__ import annotations

import numpy as np

from trainmedic.errors import InputError
from trainmedic.run.names import CANONICAL
from trainmedic.run.series import ImportNote, Run, Series
from trainmedic.run.table import LogTable

__all__ = ["merge_into", "repeats", "drop_superseded_hf_states", "same_data",
           "refuse_separate_runs", "other_runs_note"]


def same_data(a: Series, b: Series) -> bool:
    """True when two series of one metric hold the same points (one run logged twice, e.g. by
    the HF Trainer into trainer_state.json and into TensorBoard)."""
    common, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    if len(common) < max(1, int(0.8 * min(len(a), len(b)))):
        return False
    va, vb = a.values[ia], b.values[ib]
    both_nan = np.isnan(va) & np.isnan(vb)
    close = np.isclose(va, vb, rtol=1e-4, atol=1e-7) | both_nan
    return bool(close.mean() >= 0.95)


def repeats(total: Run, part: Run) -> bool:
    """True when most metrics ``part`` shares with ``total`` hold the same points there."""
    shared = [(k, s) for k, s in part.series.items() if k in total.series and len(s)]
    if not shared:
        return False
    same = 0
    for k, s in shared:
        old = total.series[k]
        if len(old) == len(s) and np.array_equal(old.steps, s.steps):
            # in log order, duplicates and restarts included (appended runs)
            ok = np.isclose(old.values, s.values, rtol=1e-4, atol=1e-7) | (
                np.isnan(old.values) & np.isnan(s.values))
            if ok.mean() >= 0.95:
                same += 1
                continue
        common = np.isin(s.steps, old.steps)
        if common.mean() >= 0.5 and same_data(old, Series(s.steps[common], s.values[common])):
            same += 1
    return same >= max(1, len(shared) / 2)


def merge_into(total: Run, part: Run, part_path: str) -> None:
    for (metric, rank), s in part.series.items():
        old = total.series.get((metric, rank))
        if old is not None and same_data(old, s):
            # One copy, plus whatever steps only the other copy has.
            base, other = (s, old) if len(s) > len(old) else (old, s)
            extra = ~np.isin(other.steps, base.steps)
            total.series[(metric, rank)] = Series(
                np.concatenate([base.steps, other.steps[extra]]),
                np.concatenate([base.values, other.values[extra]]))
            total.notes.append(ImportNote(
                "duplicate_source", f"'{metric}' (rank {rank}) is logged in more than one file "
                f"with the same values; read once", path=part_path))
            continue
        total.add(metric, s.steps, s.values, rank)
    total.events.extend(part.events)
    for k, v in part.meta.items():
        if k == "sources":
            total.meta.setdefault("sources", []).extend(v)
        elif k == "aliases" and isinstance(v, dict):
            al = total.meta.setdefault("aliases", {})
            for c, src in v.items():
                al.setdefault(c, src)
        elif k == "mapping" and isinstance(v, list):
            total.meta.setdefault("mapping", []).extend(v)
        elif k == "derived" and isinstance(v, dict):
            dv = total.meta.setdefault("derived", {})
            for c, how in v.items():
                dv.setdefault(c, how)
        else:
            total.meta.setdefault(k, v)
    total.notes.extend(part.notes)


def drop_superseded_hf_states(tables: list[LogTable], notes: list[ImportNote]
                               ) -> list[LogTable]:
    """HF saves a trainer_state.json in every checkpoint, each holding the whole history so far.
    A state whose every series is the start of another state's (same rank) is such a copy and
    is dropped, or the same points would be read once per checkpoint."""
    hf = [t for t in tables if t.format == "hf_trainer_state"]
    if len(hf) < 2:
        return tables
    gone: set[int] = set()
    for i, old in enumerate(hf):
        for j, new in enumerate(hf):
            if j == i or j in gone or new.rank != old.rank or not _is_prefix(old, new):
                continue
            # Two identical copies: keep the later one in path order.
            if not _is_prefix(new, old) or j > i:
                gone.add(i)
                break
    dropped = [hf[i] for i in sorted(gone)]
    if dropped:
        notes.append(ImportNote(
            "superseded_state", f"{len(dropped)} trainer_state.json files are earlier copies "
            "(checkpoints) of another one's history and were not read again: "
            + ", ".join(t.path for t in dropped[:3]) + (" ..." if len(dropped) > 3 else ""),
            path=dropped[0].path))
    return [t for t in tables if all(t is not d for d in dropped)]


def _is_prefix(old: LogTable, new: LogTable) -> bool:
    """True when every series of ``old`` is the beginning of the same series in ``new``."""
    if not old.columns:
        return True
    for name, s in old.columns.items():
        n = new.columns.get(name)
        if n is None or len(n) < len(s):
            return False
        if not (np.array_equal(n.steps[:len(s)], s.steps)
                and np.array_equal(n.values[:len(s)], s.values, equal_nan=True)):
            return False
    return True


def refuse_separate_runs(total: Run, part: Run, origin: int,
                          owner: dict[tuple[str, int | None], int], paths: list[str]) -> None:
    """Several paths are one run only when they hold its parts: other ranks, other metrics, or
    the same points logged twice (also at another cadence: a per-step log beside one that
    averages every N steps). Two paths that log one canonical metric on one rank, each from
    its first logged step, with other values, are two runs: merged, they would read as one
    run that went back to the start (a resume that never happened). A rank-less series and
    rank 0's are the same rank here (``metrics.csv`` beside ``metrics.rank0.csv``)."""
    for key, s in part.series.items():
        rank0 = (key[0], key[1] or 0)
        first = owner.setdefault(rank0, origin)
        if first == origin or key[0] not in CANONICAL or not len(s):
            continue
        old = total.series.get(key)
        if old is None:
            old = total.series.get((key[0], 0 if key[1] is None else None)
                                   if key[1] in (None, 0) else key)
        if old is None or not len(old) or same_data(old, s) or _same_run_resampled(old, s):
            continue
        gap = max(int(np.median(np.diff(np.unique(x.steps)))) if len(np.unique(x.steps)) > 1
                  else 1 for x in (old, s))
        if abs(int(old.steps.min()) - int(s.steps.min())) <= gap:
            raise InputError(f"{paths[first]}, {paths[origin]}", f"hold separate runs (both "
                             f"log '{key[0]}' from step {int(s.steps.min())} on, with other "
                             f"values); compare them with: trainmedic compare {paths[first]} "
                             f"{paths[origin]} (to read a resumed run's logs as one, pass "
                             f"their parent folder)")


def _same_run_resampled(a: Series, b: Series) -> bool:
    """One run's metric logged at two cadences: at the sparser series' steps the denser one
    holds the same values, or their mean over each interval (a logger that averages the
    steps since its last line, as HF's Trainer does for ``loss``)."""
    sparse, dense = (a, b) if len(a) <= len(b) else (b, a)
    if len(sparse) < 3 or len(dense) < 2 * len(sparse):
        return False
    order = np.argsort(dense.steps, kind="stable")
    steps, values = dense.steps[order], dense.values[order]
    csum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(values))])
    # Two loggers may number one step differently by one (Lightning's CSV logs global_step - 1
    # where a callback logs global_step), and HF rounds its logged loss to 4 decimals.
    for offset in (0, -1, 1):
        hits = 0
        previous = -np.inf
        for t0, v in zip(sparse.steps, sparse.values, strict=True):
            t = t0 + offset
            lo = np.searchsorted(steps, previous, side="right")
            hi = np.searchsorted(steps, t, side="right")
            previous = t
            if hi == lo or not np.isfinite(v):
                continue
            at = values[hi - 1] if steps[hi - 1] == t else np.nan
            mean = (csum[hi] - csum[lo]) / (hi - lo)
            hits += bool(np.isclose(at, v, rtol=1e-4, atol=5e-5) or
                         np.isclose(mean, v, rtol=1e-3, atol=5e-5))
        if hits >= 0.9 * len(sparse):
            return True
    return False


def other_runs_note(what: str, total: int, pick: str, rest: list[str]) -> str:
    """What a folder of several tracker runs tells the user when one is read: ``total`` runs
    (``what``: "W&B run folders", "MLflow runs"), the newest read (``pick``), the others named
    (the first five), never merged."""
    more = f" and {len(rest) - 5} more" if len(rest) > 5 else ""
    return (f"{total} {what} here; read the newest, {pick}; the others are separate runs "
            f"(pass one to read it, or compare them): {', '.join(rest[:5])}{more}")
