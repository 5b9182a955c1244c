"""The step split as a pure function of a window built by hand: every share is known."""

from __future__ import annotations

import pytest

from trainmedic.profile.breakdown import break_down, is_comm, is_matmul_class, is_sync
from trainmedic.profile.remedies import rank_levers
from trainmedic.profile.window import OpEvent, Span, Window


def _window(step_s: float = 0.100, steps: int = 4, *, data_s: float = 0.010,
            fwd_s: float = 0.040, bwd_s: float = 0.040, opt_s: float = 0.010,
            fwd_ops: list[tuple[str, float, float, bool]] | None = None,
            device: str = "cpu") -> Window:
    """Timed and profiled steps of the same shape: data, forward, backward, optimizer back
    to back from the step's start. ``fwd_ops``: (name, start, end, main thread) inside the
    forward, relative to its start (default: one mm over all of it)."""
    w = Window(device=device)
    for i in range(steps):
        t = i * step_s
        parts = (("data", data_s), ("forward", fwd_s), ("backward", bwd_s),
                 ("optimizer", opt_s))
        w.timed_steps.append(Span("step", t, t + step_s))
        w.steps.append(Span("step", 100 + t, 100 + t + step_s))
        at = t
        for name, d in parts:
            w.timed_phases.append(Span(name, at, at + d))
            p0 = 100 + at
            w.phases.append(Span(name, p0, p0 + d))
            if name == "forward":
                for op, a, b, main in fwd_ops or [("aten::mm", 0.0, d, True)]:
                    w.ops.append(OpEvent(op, p0 + a, p0 + b, 1 if main else 2, main))
            elif name in ("backward", "optimizer"):
                w.ops.append(OpEvent("aten::mm", p0, p0 + d, 1, True))
            at += d
    w.top_ops = [("aten::mm", 1.0, 10)]
    return w


def test_parts_are_split_and_shares_sum_to_one() -> None:
    b = break_down(_window())
    assert b.step_time_s == pytest.approx(0.100)
    assert b.share("data_wait") == pytest.approx(0.10)
    assert b.share("forward_ops") == pytest.approx(0.40)
    assert b.share("backward_ops") == pytest.approx(0.40)
    assert b.share("loop_other") == pytest.approx(0.0, abs=1e-9)
    assert sum(c.share for c in b.components) == pytest.approx(1.0)
    assert b.bottleneck == "compute"


def test_python_between_ops_is_host_time_in_its_phase() -> None:
    # the forward's ops cover 10 of its 40 ms: 30 ms of Python
    b = break_down(_window(fwd_ops=[("aten::mm", 0.0, 0.005, True),
                                    ("aten::add", 0.035, 0.040, True)]))
    assert b.share("host_python") == pytest.approx(0.30)
    assert b.host_by_phase["forward"] == pytest.approx(0.030)
    assert b.bottleneck == "compute"  # ops 60 % vs host 30 %
    b = break_down(_window(fwd_s=0.070, bwd_s=0.010,
                           fwd_ops=[("aten::mm", 0.0, 0.005, True)]))
    assert b.bottleneck == "host"


def test_a_collective_the_step_waits_on_is_exposed_and_one_behind_compute_is_not() -> None:
    w = _window(fwd_ops=[("aten::mm", 0.0, 0.010, True),
                         # the backend's thread: 10-30 ms alone (exposed), 30-40 ms under mm
                         ("gloo:all_reduce", 0.010, 0.040, False),
                         ("aten::mm", 0.030, 0.040, True)])
    b = break_down(w)
    assert b.share("exposed_comm") == pytest.approx(0.20)
    assert b.overlapped_comm_s == pytest.approx(0.010)
    assert b.share("host_python") == pytest.approx(0.0, abs=1e-9)


def test_input_bound_when_waiting_for_data_dominates() -> None:
    b = break_down(_window(data_s=0.060, fwd_s=0.015, bwd_s=0.015, opt_s=0.010))
    assert b.bottleneck == "input" and "60%" in b.bottleneck_evidence


def test_memory_bound_when_op_time_is_not_matmul() -> None:
    w = _window()
    w.top_ops = [("aten::add_", 3.0, 10), ("aten::mm", 1.0, 10)]
    b = break_down(w)
    assert b.bottleneck == "memory" and b.matmul_share_of_ops == pytest.approx(0.25)


def test_a_far_off_step_is_left_out_and_counted() -> None:
    w = _window(steps=5)
    w.timed_steps[2] = Span("step", w.timed_steps[2].start_s, w.timed_steps[2].start_s + 0.9)
    b = break_down(w)
    assert b.outlier_steps == 1 and b.step_time_s == pytest.approx(0.100)
    assert b.share("data_wait") == pytest.approx(0.10)


def test_on_cpu_a_value_read_is_no_sync_but_on_a_gpu_it_is() -> None:
    assert not is_sync("aten::_local_scalar_dense", "cpu")
    assert is_sync("aten::_local_scalar_dense", "cuda")
    assert is_sync("cudaStreamSynchronize", "cuda")
    assert is_comm("c10d::allreduce_") and is_comm("nccl:all_reduce")
    assert not is_comm("aten::mm")
    assert is_matmul_class("aten::addmm") and is_matmul_class("aten::convolution")
    assert not is_matmul_class("aten::add_")


def test_no_timed_step_is_an_error() -> None:
    with pytest.raises(ValueError):
        break_down(Window())


def test_levers_rank_by_share_skip_excluded_and_list_a_lever_once() -> None:
    b = break_down(_window(data_s=0.050, fwd_s=0.020, bwd_s=0.020, opt_s=0.010))
    levers = rank_levers(b, exclude=frozenset({"prefetch"}))
    names = [lv.name for lv in levers]
    assert names[0] == "num_workers"
    assert levers[0].max_speedup == pytest.approx(1 / (1 - 0.5))
    assert "prefetch" not in names
    assert len(names) == len(set(names))
    assert all(lv.target_share >= 0.05 for lv in levers)
    bf16 = next(lv for lv in levers if lv.name == "bf16")
    assert bf16.changes_semantics and not levers[0].changes_semantics


def test_a_bimodal_window_with_no_step_near_the_median_is_split_whole() -> None:
    w = _window(steps=4)
    for i, d in enumerate((0.05, 0.05, 0.4, 0.4)):  # median 0.225: none within 0.5-1.5x
        t = w.timed_steps[i].start_s
        w.timed_steps[i] = Span("step", t, t + d)
    b = break_down(w)
    assert b.outlier_steps == 0 and b.steps == 4
    assert sum(c.share for c in b.components) == pytest.approx(1.0)


def test_an_aten_op_named_like_a_collective_is_not_communication() -> None:
    assert not is_comm("aten::broadcast_tensors")  # F.mse_loss calls it
    assert is_comm("gloo:broadcast") and is_comm("record_param_comms")
    b = break_down(_window(fwd_ops=[("aten::broadcast_tensors", 0.0, 0.040, True)]))
    assert b.share("exposed_comm") == 0 and b.share("forward_ops") == pytest.approx(0.40)


def test_a_loader_thread_s_copies_are_not_the_step_s_ops() -> None:
    # a pin-memory thread copies during the forward: the forward is still Python
    b = break_down(_window(fwd_ops=[("aten::pin_memory", 0.0, 0.040, False)]))
    assert b.share("forward_ops") == pytest.approx(0, abs=1e-9)
    assert b.share("host_python") == pytest.approx(0.40)


def test_on_a_gpu_the_step_s_end_is_a_wait_for_the_device_not_host_time() -> None:
    # the host queues the work in 20 of 100 ms and waits 80 ms at the step's closing sync
    w = _window(data_s=0.005, fwd_s=0.005, bwd_s=0.005, opt_s=0.005, device="cuda")
    b = break_down(w)
    assert b.share("device_wait") == pytest.approx(0.80) and b.share("loop_other") == 0
    assert b.bottleneck in ("compute", "memory")
