"""Stack and flight-recorder parsing on small fixtures (tests/data/hang/: the dumps of a real
2-rank gloo desync, rank 0 in all_reduce #5 and rank 1 in broadcast #5, written by
tests/dist/hang_worker.py)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from trainmedic.dist.desync import current_collective, find_mismatches
from trainmedic.dist.hang_diagnosis import diagnose_hang_dir
from trainmedic.dist.stack_trace import locate, main_thread, parse_faulthandler, parse_traceback
from trainmedic.dist.straggler import straggler_scores
from trainmedic.errors import InputError

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "hang" / "desync"

FAULTHANDLER = """\
Current thread 0x00007fcc6bfff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 982 in run

Thread 0x00007fcc90fc9b80 (most recent call first):
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/x/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/home/me/train.py", line 88 in step
  File "/home/me/train.py", line 120 in <module>
"""

TRACEBACK = """\
Traceback (most recent call last):
  File "/home/me/train.py", line 40, in <module>
    for x in loader:
  File "/x/site-packages/torch/utils/data/dataloader.py", line 734, in __next__
    data = self._next_data()
RuntimeError: DataLoader timed out after 5 seconds
"""


def test_faulthandler_parse_and_main_thread_by_id() -> None:
    threads = parse_faulthandler(FAULTHANDLER)
    assert [(t.thread_id, t.current, len(t.frames)) for t in threads] == [
        ("0x00007fcc6bfff6c0", True, 1), ("0x00007fcc90fc9b80", False, 4)]
    main = main_thread(threads, "0x7fcc90fc9b80")
    assert main is threads[1]
    assert main_thread(threads, None) is threads[1]  # by its <module> frame
    loc = locate(main.frames)
    assert (loc.kind, loc.op, loc.where()) == ("collective", "barrier", "train.py:88")


def test_traceback_parse_locates_the_data_loader() -> None:
    frames = parse_traceback(TRACEBACK)
    assert [f.func for f in frames] == ["__next__", "<module>"]
    loc = locate(frames)
    assert (loc.kind, loc.where()) == ("data_loader", "train.py:40")


def test_flight_recorder_desync_at_the_same_sequence_number() -> None:
    frs = {r: json.loads((DATA / f"rank{r}.hang0.fr.json").read_text()) for r in (0, 1)}
    c0, c1 = (current_collective(r, frs[r]) for r in (0, 1))
    assert c0 is not None and (c0.op, c0.seq, c0.in_flight, c0.last_completed_seq) == (
        "all_reduce", 5, True, 4)
    assert c1 is not None and (c1.op, c1.seq) == ("broadcast", 5)
    [m] = find_mismatches(frs)
    assert (m.seq, m.kind, m.calls[0][0], m.calls[1][0]) == (5, "op", "all_reduce", "broadcast")
    # same ops, another shape at #5: a shape mismatch
    frs[1]["entries"][-1]["profiling_name"] = "gloo:all_reduce"
    frs[1]["entries"][-1]["input_sizes"] = [[8]]
    [m] = find_mismatches(frs)
    assert (m.seq, m.kind) == (5, "shape")


def test_diagnosis_of_the_fixture_folder(tmp_path: pathlib.Path) -> None:
    d = diagnose_hang_dir(DATA)
    assert d.hung and d.world_size == 2
    assert "rank 0 is in all_reduce #5, rank 1 is in broadcast #5: op mismatch" in d.summary[0]
    # without rank 1's dump and heartbeat: it never arrived
    for p in DATA.glob("rank0.*"):
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "heartbeat.rank0.json").write_text((DATA / "heartbeat.rank0.json").read_text())
    d = diagnose_hang_dir(tmp_path)
    assert d.world_size == 2 and d.ranks[1].status == "never_arrived"
    assert "rank 1 never arrived: no heartbeat and no dump" in d.summary


def _signal_file(folder: pathlib.Path, pid: int, ppid: int, role: str, stacks: str,
                 argv: tuple[str, ...] = ("train.py",)) -> None:
    header = {"pid": pid, "ppid": ppid, "rank": None, "role": role,
              "main_thread": "0x00007fcc90fc9b80", "argv": list(argv), "started_unix": 1.0}
    (folder / f"signal.proc.pid{pid}.txt").write_text(
        f"# trainmedic-stack-hook {json.dumps(header)}\n{stacks}")


HELPER = FAULTHANDLER.replace("/home/me/train.py", "/home/me/helper.py")


def test_a_job_without_ranks_is_read_as_rank_0_its_helpers_left_unnumbered(
        tmp_path: pathlib.Path) -> None:
    """dist watch -- python train.py, which started a helper process and a forked data-loader
    worker, none with RANK: train.py (the hooked process whose parent is not hooked) is
    rank 0, its forked worker with it; the helper stays in the record, unnumbered."""
    _signal_file(tmp_path, 200, 1, "process", FAULTHANDLER)
    _signal_file(tmp_path, 250, 200, "process", HELPER, ("-c",))
    _signal_file(tmp_path, 300, 200, "forked child", FAULTHANDLER)
    d = diagnose_hang_dir(tmp_path)
    assert d.hung and d.world_size == 1
    rank0 = d.ranks[0]
    assert rank0.status == "stuck" and rank0.location is not None
    assert rank0.location.user_frame is not None
    assert rank0.location.user_frame.file == "/home/me/train.py"
    assert not d.notes  # no flight-recorder advice for a job without a process group
    # Two unrelated programs (or an earlier run's files), neither a rank: nothing numbered.
    _signal_file(tmp_path, 400, 1, "process", FAULTHANDLER)
    assert diagnose_hang_dir(tmp_path).ranks[0].status == "never_arrived"


def test_a_launchers_only_child_is_rank_0(tmp_path: pathlib.Path) -> None:
    launcher = FAULTHANDLER.replace("/home/me/train.py", "/x/bin/accelerate")
    _signal_file(tmp_path, 100, 1, "process", launcher, ("/x/bin/accelerate", "launch",
                                                         "train.py"))
    _signal_file(tmp_path, 200, 100, "process", FAULTHANDLER)
    loc = diagnose_hang_dir(tmp_path).ranks[0].location
    assert loc is not None and loc.user_frame is not None
    assert loc.user_frame.file == "/home/me/train.py"


def test_empty_folder_is_an_input_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InputError, match="no heartbeat, hang dump or signal dump"):
        diagnose_hang_dir(tmp_path)
    with pytest.raises(InputError, match="no such folder"):
        diagnose_hang_dir(tmp_path / "missing")


def test_cli_exit_codes(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from trainmedic.cli.dist_hang import diagnose

    assert CliRunner().invoke(diagnose, [str(DATA)]).exit_code == 1
    res = CliRunner().invoke(diagnose, [str(tmp_path)])
    assert res.exit_code == 2 or isinstance(res.exception, InputError), res.output
    (tmp_path / "heartbeat.rank0.json").write_text(json.dumps(
        {"rank": 0, "world_size": 1, "step": 9, "closed": True, "wall_time_unix": 1.0}))
    res = CliRunner().invoke(diagnose, [str(tmp_path), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["hung"] is False


def test_straggler_relative_score_as_nvrx_defines_it() -> None:
    scores = straggler_scores({0: [0.1, 0.1, 0.1], 1: [0.2, 0.2, 0.2, 0.2], 2: [0.1] * 3,
                               3: [0.5]})  # rank 3: too few steps
    assert [s.rank for s in scores] == [0, 1, 2]
    s1 = scores[1]
    assert s1.relative_score == pytest.approx(0.5) and s1.straggler
    assert s1.ratio_to_median == pytest.approx(2.0)
    assert not scores[0].straggler and scores[0].relative_score == pytest.approx(1.0)
    assert straggler_scores({0: [0.1] * 5}) == []
