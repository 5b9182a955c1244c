"""loss_spike for a point >= 10x every other point of a log (short_log.towering_points): the
short, noisy logs whose running-median z-score cannot reach the spike bar."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.short_log import towering_points
from trainmedic.run.series import Run

# TF-slim, global steps 317-327: per-step losses 0.12-0.83, with 11.85 and 3417.8 among them.
SLIM = [0.8259, 0.6090, 11.8465, 0.1199, 0.2738, 0.8016, 0.1401, 0.3911, 0.1479, 0.5371,
        3417.7632]


def _spikes(values: list[float], first_step: int = 317):
    run = Run(source="t")
    run.add("loss", np.arange(first_step, first_step + len(values)), np.asarray(values))
    return [f for f in diagnose(run).findings if f.symptom == "loss_spike"]


def test_two_towering_points_in_a_noisy_eleven_point_log() -> None:
    assert towering_points(np.asarray(SLIM)) == [2, 10]
    f = sorted(_spikes(SLIM), key=lambda f: f.onset_step)
    assert [(x.onset_step, x.severity) for x in f] == [(319, "warning"), (327, "warning")]
    assert f[0].end_step == 320 and "recovery not seen" in f[1].summary


@pytest.mark.parametrize("values", [
    [5.0, 0.9, 0.8, 0.7, 0.6, 0.5],             # a high first point is the start
    [60.0, 20.0, 1.0, 0.9, 0.8, 0.7, 0.6],      # ... and so is the second after it
    [1.0, 0.9, 30.0, 25.0, 28.0, 0.8, 0.7, 0.6],  # three high points: a heavy tail, not spikes
    [1.0, 0.9, 8.0, 0.8, 0.7, 0.6],              # 8x the highest other point: under 10x
    [1.0, 0.9, 0.8, 0.7],                         # 4 points: too few
])
def test_no_towering_point(values) -> None:
    assert towering_points(np.asarray(values)) == []


def test_a_towering_first_point_of_an_excerpt_is_a_spike() -> None:
    # An issue excerpt from epoch 2 (steps 2200-3400 every 200): its first point is 1590x
    # the others. Seven intervals into the run, it is no start.
    values = [25545.7, 16.06, 10.78, 6.70, 6.12, 5.02, 5.57]
    run = Run(source="t")
    run.add("loss", np.arange(2200, 3600, 200), np.asarray(values))
    f = [g for g in diagnose(run).findings if g.symptom == "loss_spike"]
    assert [(g.onset_step, g.severity, g.end_step) for g in f] == [(2200, "warning", 2400)]
    # the same values from the run's first logged interval are its start
    run = Run(source="t")
    run.add("loss", np.arange(200, 1600, 200), np.asarray(values))
    assert not [g for g in diagnose(run).findings if g.symptom == "loss_spike"]
