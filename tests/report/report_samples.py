"""Hand-built runs and diagnoses for the report tests (no detectors involved)."""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import (
    Cause,
    CheckNotRun,
    Diagnosis,
    Evidence,
    Finding,
    Intervention,
)
from trainmedic.run.series import ImportNote, Run


def sample_run(n: int = 2000, *, nan_at: int | None = 1500, spike_at: int = 800,
               ranks: tuple[int | None, ...] = (None,)) -> Run:
    rng = np.random.default_rng(0)
    steps = np.arange(n)
    run = Run(source="runs/sample/metrics.csv")
    for rank in ranks:
        loss = 4.0 * np.exp(-steps / (n / 4)) + 1.5 + 0.05 * rng.standard_normal(n)
        loss[spike_at] = 9.5
        if nan_at is not None:
            loss[nan_at:nan_at + 5] = np.nan
        run.add("loss", steps, loss, rank)
        run.add("grad_norm", steps, np.abs(1.0 + 0.2 * rng.standard_normal(n)), rank)
        run.add("step_time_s", steps, 0.2 + 0.01 * rng.random(n), rank)
        run.add("data_time_s", steps, 0.01 + 0.01 * rng.random(n), rank)
        run.add("mem_alloc_mb", steps, 1000 + steps * 0.5, rank)
    vs = np.arange(0, n, max(1, n // 10))
    run.add("val_loss", vs, 4.0 * np.exp(-vs / (n / 4)) + 1.7)
    warm = np.minimum(1.0, (steps + 1) / 100) * 3e-4 * (0.5 + 0.5 * np.cos(np.pi * steps / n))
    run.add("lr", steps, warm + 1e-9)
    run.add("eval_accuracy", vs, np.linspace(0.1, 0.8, len(vs)))
    run.notes.append(ImportNote("skipped_line", "non-numeric cell in column 'loss'",
                                "metrics.csv", 17))
    return run


def sample_diagnosis(source: str = "runs/sample/metrics.csv") -> Diagnosis:
    spike = Finding(
        symptom="loss_spike", severity="warning", confidence=0.9, onset_step=800,
        end_step=801, metric="loss",
        summary="loss jumped 4.2x its running median at step 800 and recovered by 801",
        evidence=(Evidence("loss", 800, 9.5, 2.26, "measured",
                           "running median of the previous 50 steps"),
                  Evidence("grad_norm", 800, 1.1, 1.0, "measured", "median grad norm")),
        causes=(Cause("a bad batch", "high", True, "the spike recovered within 1 step"),
                Cause("lr too high", "low", True, "lr had been falling for 700 steps"),
                Cause("numerical overflow in fp16", "low", False,
                      "log loss_scale to check")),
        interventions=(Intervention("skip the batch at step 800 and resume from the checkpoint "
                                    "before it", "loses ~50 steps of compute",
                                    "loss over steps 790-810 stays within 1.2x of the median"),
                       Intervention("clip gradients at 1.0", "none measurable",
                                    "no spike above 2x the median", True)),
    )
    nan = Finding(
        symptom="nonfinite_loss", severity="error", confidence=1.0, onset_step=1500,
        end_step=1504, metric="loss", summary="loss became NaN at step 1500 (5 steps)",
        evidence=(Evidence("loss", 1500, float("nan"), None, "measured", "first non-finite"),),
        causes=(Cause("learning rate too high", "medium", False, "log lr per step to check"),),
        interventions=(Intervention("resume from the last checkpoint before step 1500 with "
                                    "anomaly detection on", "about 2x slower steps while on",
                                    "the re-run passes step 1500 with a finite loss"),),
    )
    info = Finding(symptom="memory_growth", severity="info", confidence=0.6, onset_step=0,
                   end_step=1999, metric="mem_alloc_mb",
                   summary="allocated memory grew 0.5 MB per step",
                   evidence=(Evidence("mem_alloc_mb", 1999, 1999.5, 1000.0, "estimated",
                                      "linear trend"),))
    return Diagnosis(
        source=source,
        metrics_seen=["data_time_s", "eval_accuracy", "grad_norm", "loss", "lr",
                      "mem_alloc_mb", "step_time_s", "val_loss"],
        findings=[info, spike, nan],
        checks_not_run=[CheckNotRun("loss_scale_collapse", ("loss_scale",)),
                        CheckNotRun("straggler", (), "single process: needs two or more ranks"),
                        CheckNotRun("nonfinite_grad", ("loss_scale",))],
        notes=["skipped 1 line with a non-numeric cell (metrics.csv:17)"],
    )
