"""A run and its findings as TensorBoard event files (``trainmedic export --tensorboard``).

Written with TensorBoard's own writer (``tensorboard.summary.writer.event_file_writer``, the
one ``torch.utils.tensorboard.SummaryWriter`` uses) and its text plugin's summary
(``tensorboard.plugins.text.summary_v2.text_pb``), so TensorBoard reads the files as its own;
tensorboard is imported only here (the ``tensorboard`` extra).

Layout under ``DIR``:

* one event file per rank, in ``DIR/rank<N>/`` (TensorBoard shows each folder as a run, so
  ranks can be compared on one chart); series without a rank go in ``DIR`` itself;
* per step one event holding every metric logged at that step, as ``simple_value`` scalars
  (float32, what ``SummaryWriter.add_scalar`` writes; NaN and inf are kept; a finite value
  beyond float32's range becomes inf, and the CLI line says how many did). Tags are the metric
  names, so ``layer/<module>/<stat>`` groups under ``layer`` in TensorBoard;
* each finding as markdown text under the tag ``trainmedic/findings`` at its onset step, in its
  rank's folder (``DIR`` for findings about the whole run), findings of one step in one text;
  and one overview (verdict, every finding, checks not run) under ``trainmedic/overview`` at
  the run's last step, in ``DIR``.

Events are written in step order, the texts among the scalars, as a live writer would have
written them: TensorBoard reads an event whose step is below the largest seen so far as a
restart and drops the points of that event's tags at and after its step
(``EventAccumulator._CheckForOutOfOrderStepAndMaybePurge``). A resumed series still goes back
where it went back in the log, so TensorBoard shows the resumed curve and trainmedic's own
reader, which keeps log order, sees the resume.

TensorBoard shows 10 texts per tag by default (its text plugin downsamples; see
tensorflow/tensorboard#1258); with more findings than that, start it with
``--samples_per_plugin text=1000`` (not ``text=0``, which tensorflow/tensorboard#5550 reports
shows nothing under the data-provider backend).

Files are written into a hidden staging folder inside ``DIR`` and moved into place at the end,
so a failed export leaves no partial event file where TensorBoard looks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from trainmedic.diagnose.finding import Diagnosis, Finding
from trainmedic.errors import InputError, MissingExtraError
from trainmedic.report.csv_export import ExportedFile, Progress, WideTable, wide_table
from trainmedic.report.wording import (
    cause_line,
    checks_not_run_lines,
    fmt_span,
    fmt_step,
    intervention_lines,
    sorted_findings,
    verdict,
)
from trainmedic.run.series import Run

__all__ = ["write_tensorboard", "require_tensorboard", "check_tensorboard_dir",
           "finding_markdown", "overview_markdown", "FINDINGS_TAG", "OVERVIEW_TAG",
           "INSTALL_HINT"]

FINDINGS_TAG = "trainmedic/findings"
OVERVIEW_TAG = "trainmedic/overview"
INSTALL_HINT = "pip install 'trainmedic[tensorboard]'"

_EVENT_MARK = "tfevents"  # every event file's name holds it (events.out.tfevents.<time>...)
_STAGING_PREFIX = ".trainmedic-export-"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def require_tensorboard() -> None:
    """Raise a one-line ``TrainmedicError`` naming the extra when TensorBoard is missing."""
    try:
        from tensorboard.plugins.text.summary_v2 import text_pb  # noqa: F401
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"--tensorboard needs TensorBoard, which is not installed: "
                              f"{INSTALL_HINT}") from exc


def _rank_dir(out_dir: Path, rank: int | None) -> Path:
    return out_dir if rank is None else out_dir / f"rank{rank}"


def _owned_event_files(out_dir: Path) -> list[Path]:
    """Event files in the places an export writes: ``DIR`` and ``DIR/rank<N>/``."""
    found = [p for p in out_dir.glob(f"*{_EVENT_MARK}*") if p.is_file()]
    for sub in out_dir.glob("rank*"):
        if sub.is_dir() and sub.name[4:].isdigit():
            found += [p for p in sub.glob(f"*{_EVENT_MARK}*") if p.is_file()]
    return sorted(found)


def _first_event_file(out_dir: Path) -> Path | None:
    for root, dirs, files in os.walk(out_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(_STAGING_PREFIX))
        for name in sorted(files):
            if _EVENT_MARK in name:
                return Path(root) / name
    return None


def check_tensorboard_dir(out_dir: str | os.PathLike[str], *, force: bool,
                          inputs: Iterable[str] = ()) -> None:
    """Refuse (``InputError``) a ``DIR`` that is a file, that holds or is inside an input of
    the run, or, unless ``force``, that already holds event files."""
    target = Path(out_dir)
    if target.exists() and not target.is_dir():
        raise InputError(str(target), "is a file; --tensorboard expects a folder")
    here = target.resolve()
    for raw in inputs:
        src = Path(raw).resolve()
        if src == here or here in src.parents or src in here.parents:
            raise InputError(str(target), f"overlaps the run being read ({raw}); choose a "
                             "--tensorboard folder outside it (even --force will not "
                             "replace an input)")
    if force or not target.is_dir():
        return
    existing = _first_event_file(target)
    if existing is not None:
        raise InputError(str(target), f"already holds TensorBoard event files ({existing}); "
                         "pass --force to replace those of a previous export, or choose an "
                         "empty folder")


# -- the texts -----------------------------------------------------------------------------


def finding_markdown(finding: Finding, metrics_seen: list[str]) -> str:
    """One finding as markdown: symptom, severity, steps, summary, top cause, intervention."""
    rank = f" · rank {finding.rank}" if finding.rank is not None else ""
    metric = f" · `{finding.metric}`" if finding.metric else ""
    lines = [f"### {finding.severity.upper()} · {finding.symptom}",
             f"**{fmt_span(finding)}**{rank}{metric} · confidence {finding.confidence:.2f}",
             "", finding.summary]
    if finding.causes:
        cause, check = cause_line(finding.causes[0], metrics_seen)
        lines += ["", f"**Top cause:** {cause}: {check}"]
    if finding.interventions:
        action, cost, check = intervention_lines(finding.interventions[0])
        lines += ["", f"**Try:** {action}", "", f"- {cost}", f"- {check}"]
    return "\n".join(lines)


def overview_markdown(diagnosis: Diagnosis, run: Run) -> str:
    """The whole diagnosis in brief: verdict, every finding in one line, checks not run."""
    first = [int(s.steps.min()) for s in run.series.values() if len(s)]
    last = run.last_step()
    lines = ["## trainmedic diagnosis", "", f"**{verdict(diagnosis)}**", "",
             f"Source: `{diagnosis.source or run.source}` · steps "
             f"{fmt_step(min(first) if first else None)}–{fmt_step(last)} · "
             f"{len(run.metrics())} metrics"]
    if diagnosis.findings:
        lines += ["", "| severity | symptom | where | rank | summary |",
                  "|---|---|---|---|---|"]
        for f in sorted_findings(diagnosis.findings):
            rank = "" if f.rank is None else str(f.rank)
            summary = f.summary.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {f.severity} | {f.symptom} | {fmt_span(f)} | {rank} | {summary} |")
    not_run = checks_not_run_lines(diagnosis.checks_not_run)
    if not_run:
        lines += ["", "**Checks not run:**", ""] + [f"- {line}" for line in not_run]
    return "\n".join(lines)


class _Text(NamedTuple):
    step: int
    tag: str
    body: str
    findings: int
    """How many findings the text holds (0 for the overview)."""


def _texts_by_rank(diagnosis: Diagnosis | None, run: Run, ranks: list[int | None]
                   ) -> dict[int | None, list[_Text]]:
    """``{rank: [text, ...]}`` sorted by step; the findings of one step and rank are joined
    into one text (of two texts of one tag at one step, TensorBoard shows one)."""
    out: dict[int | None, list[_Text]] = {r: [] for r in ranks}
    if diagnosis is None:
        return out
    last = run.last_step() or 0
    grouped: dict[tuple[int | None, int], list[Finding]] = {}
    for f in sorted_findings(diagnosis.findings):
        rank = f.rank if f.rank in out else None
        step = f.onset_step if f.onset_step is not None else last
        grouped.setdefault((rank, step), []).append(f)
    metrics = list(diagnosis.metrics_seen) or run.metrics()
    for (rank, step), fs in grouped.items():
        body = "\n\n---\n\n".join(finding_markdown(f, metrics) for f in fs)
        out[rank].append(_Text(step, FINDINGS_TAG, body, len(fs)))
    out[None].append(_Text(last, OVERVIEW_TAG, overview_markdown(diagnosis, run), 0))
    for texts in out.values():
        texts.sort(key=lambda t: (t.step, t.tag))
    return out


# -- the events ----------------------------------------------------------------------------


def _events(table: WideTable, texts: list[_Text], wall_time: float,
            counts: dict[str, int], progress: Progress) -> Iterator[Any]:
    """Scalar events in row order, each text slotted in before the first row past its step."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.text.summary_v2 import text_pb

    def text_event(t: _Text) -> Any:
        return event_pb2.Event(step=t.step, wall_time=wall_time, summary=text_pb(t.tag, t.body))

    pending = list(texts)
    k = 0
    names = table.metrics
    done = 0
    for steps, vals, present in table.chunks():
        with np.errstate(over="ignore"):
            as_f32 = vals.astype(np.float32)
        counts["overflow"] += int(np.count_nonzero(present & np.isfinite(vals)
                                                   & ~np.isfinite(as_f32)))
        for step, row, prow in zip(steps.tolist(), as_f32.astype(np.float64).tolist(),
                                   present.tolist(), strict=True):
            while k < len(pending) and pending[k].step < step:
                yield text_event(pending[k])
                k += 1
            ev = event_pb2.Event(step=step, wall_time=wall_time)
            add = ev.summary.value.add
            for name, v, p in zip(names, row, prow, strict=True):
                if p:
                    add(tag=name, simple_value=v)
            yield ev
        done += len(steps)
        progress(done, len(table))
    for t in pending[k:]:
        yield text_event(t)


def _write_stream(logdir: Path, events: Iterator[Any]) -> Path:
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(logdir), max_queue_size=1024)
    try:
        for ev in events:
            writer.add_event(ev)
    finally:
        writer.close()
    files = [p for p in logdir.iterdir() if _EVENT_MARK in p.name]
    if len(files) != 1:  # pragma: no cover - EventFileWriter writes exactly one file
        raise InputError(str(logdir), f"expected one event file, found {len(files)}")
    return files[0]


def write_tensorboard(run: Run, diagnosis: Diagnosis | None, out_dir: str | os.PathLike[str],
                      *, force: bool = False, progress: Progress | None = None
                      ) -> list[ExportedFile]:
    """Write ``run``'s metrics (and ``diagnosis``' findings, when given) as TensorBoard event
    files under ``out_dir``; see the module docstring for the layout.

    Refuses with ``InputError`` when ``out_dir`` already holds event files, unless ``force``;
    with ``force`` the event files of a previous export (in ``out_dir`` and its ``rank<N>/``
    folders) are replaced, nothing else is touched. Returns one ``ExportedFile`` per event file.
    """
    require_tensorboard()
    target = Path(out_dir)
    check_tensorboard_dir(target, force=force)
    ranks = [r for r in run.ranks()
             if any(rr == r and len(s) for (_, rr), s in run.series.items())]
    if None not in ranks:
        ranks.insert(0, None)  # DIR itself: findings about the whole run and the overview
    tables = {r: wide_table(run, r) for r in ranks}
    texts = _texts_by_rank(diagnosis, run, ranks)
    total = sum(len(t) for t in tables.values())
    wall_time = time.time()
    try:
        target.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=target))
    except OSError as exc:
        raise InputError(str(target), f"cannot write there ({exc.strerror})") from exc
    written: list[ExportedFile] = []
    try:
        done = 0
        for rank, table in tables.items():
            if not len(table) and not texts[rank]:
                continue
            counts = {"overflow": 0}

            def step_done(n: int, _base: int = done) -> None:
                if progress is not None:
                    progress(_base + n, total)

            staged = _write_stream(_rank_dir(stage, rank),
                                   _events(table, texts[rank], wall_time, counts, step_done))
            done += len(table)
            written.append(ExportedFile(
                staged, rank, len(table), len(table.metrics), unit="steps",
                findings=sum(t.findings for t in texts[rank]),
                overview=any(t.tag == OVERVIEW_TAG for t in texts[rank]),
                notes=(f"{counts['overflow']} finite values beyond float32's range written as "
                       "±inf",) if counts["overflow"] else ()))
        old = _owned_event_files(target) if force else []
        for path in old:
            path.unlink()
        out: list[ExportedFile] = []
        for staged_file in written:
            final_dir = _rank_dir(target, staged_file.rank)
            final_dir.mkdir(parents=True, exist_ok=True)
            final = final_dir / staged_file.path.name
            os.replace(staged_file.path, final)
            out.append(replace(staged_file, path=final))
    except OSError as exc:
        raise InputError(str(target), f"cannot write the event files ({exc.strerror or exc})"
                         ) from exc
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out
