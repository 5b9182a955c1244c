"""Console logs of fairseq, OpenNMT-py, Megatron-LM, NeMo 2 and nanoGPT, and Keras' CSVLogger
and History JSON, read to the right steps and losses; and the user's own line pattern
(``load_paths(..., line_pattern=...)``, the CLI's ``--line-pattern``).

The fixtures under tests/data/trackers/ copy each framework's print format (see README.md
there); their numbers follow the formulas repeated here, so every expected value is computed,
not copied from the reader's output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainmedic.errors import ConfigError, UnrecognizedInputError
from trainmedic.run import load_run
from trainmedic.run.loader import load_paths

DATA = Path(__file__).resolve().parent.parent / "data" / "trackers"


def test_fairseq_simple_progress_lines() -> None:
    run = load_run(str(DATA / "fairseq_train.log"))
    loss = run.get("loss")
    inner = [u for ep in (1, 2) for u in ((ep - 1) * 300 + k for k in (100, 200, 300))]
    # the inner lines' num_updates and losses; the epoch summary line after each epoch's last
    # inner line repeats its step with the epoch's mean (8.85, 7.65), which is not read there
    assert loss.steps.tolist() == inner
    assert loss.values.tolist() == pytest.approx([10 - 0.004 * u for u in inner])
    assert any(n.kind == "epoch_summary" and n.detail.startswith("2 ") for n in run.notes)
    val = run.get("val_loss")
    assert val.steps.tolist() == [300, 600]
    assert val.values.tolist() == pytest.approx([10 - 0.004 * u + 0.3 for u in (300, 600)])
    assert run.get("grad_norm").values[0] == pytest.approx(1.4)


def test_opennmt_steps_and_xent() -> None:
    run = load_run(str(DATA / "opennmt_train.log"))
    steps = list(range(50, 401, 50))
    assert run.get("loss").steps.tolist() == steps
    assert run.get("loss").values.tolist() == pytest.approx([6.0 - s / 200 for s in steps],
                                                            abs=5e-3)
    assert run.get("lr").values[-1] == pytest.approx(1e-4)
    # "Validation perplexity: 181.272" after step 200: val_loss = ln(ppl) at that step
    val = run.get("val_loss")
    assert val.steps.tolist() == [200, 400]
    assert val.values.tolist() == pytest.approx([6.2 - s / 200 for s in (200, 400)], abs=1e-3)


def test_a_bracketed_logger_prefix_does_not_join_the_metric_name(tmp_path: Path) -> None:
    """OpenNMT-py prints "Train perplexity: X" at each validation, after its
    "[<time> INFO] " prefix: the level is no part of the name."""
    text = (DATA / "opennmt_train.log").read_text().replace(
        "INFO] Validation perplexity: 181.272",
        "INFO] Train perplexity: 150.1\n[2023-05-01 10:04:30,456 INFO] Validation "
        "perplexity: 181.272")
    (tmp_path / "train.log").write_text(text)
    run = load_run(str(tmp_path / "train.log"))
    assert "train_perplexity" in run.metrics()
    assert not [m for m in run.metrics() if m.startswith("info")]
    assert run.get("val_loss").steps.tolist() == [200, 400]


def test_megatron_iterations_and_lm_loss() -> None:
    run = load_run(str(DATA / "megatron_train.log"))
    its = list(range(10, 101, 10))
    assert run.get("loss").steps.tolist() == its
    assert run.get("loss").values.tolist() == pytest.approx([8 - it / 50 for it in its])
    assert run.get("step_time_s").values[0] == pytest.approx(1.2355)
    assert run.get("loss_scale").values[0] == 65536.0
    # " validation loss at iteration 100 | lm loss value: 6.2E+00 | lm loss PPL: ..."
    assert run.get("val_loss").steps.tolist() == [100]
    assert run.get("val_loss").values.tolist() == [6.2]


def test_megatron_end_of_training_lines_keep_val_and_test_apart(tmp_path: Path) -> None:
    text = (DATA / "megatron_train.log").read_text()
    sep = "-" * 100 + "\n"
    text += (sep + " validation loss at the end of training for val data | lm loss value: "
             "5.950000E+00 | lm loss PPL: 3.836495E+02 | \n" + sep + sep +
             " validation loss at the end of training for test data | lm loss value: "
             "5.990000E+00 | lm loss PPL: 3.993072E+02 | \n" + sep)
    (tmp_path / "train.log").write_text(text)
    run = load_run(str(tmp_path / "train.log"))
    assert run.get("val_loss").values.tolist() == [6.2, 5.95]  # the test split's is not val
    assert run.get("test_lm_loss_value").values.tolist() == [5.99]


def test_tacotron2_iteration_between_the_loss_name_and_its_value() -> None:
    """"Train loss 100 0.512345 ...": the number after the name is the iteration, not the
    loss (read so, the loss would climb with the step and its value be lost)."""
    run = load_run(str(DATA / "tacotron2_train.log"))
    its = list(range(60))
    assert run.get("loss").steps.tolist() == its
    assert run.get("loss").values.tolist() == pytest.approx([1.5 - it / 100 for it in its])
    assert run.get("grad_norm").values[:3].tolist() == pytest.approx([2.0, 2.1, 2.2])
    assert run.get("step_time_s").values[:2].tolist() == pytest.approx([0.5, 0.51])
    val = run.get("val_loss")
    assert val.steps.tolist() == [19, 39, 59]
    assert val.values.tolist() == pytest.approx([1.6 - it / 100 for it in (19, 39, 59)])


def test_nemo2_global_step_and_reduced_train_loss() -> None:
    run = load_run(str(DATA / "nemo_train.log"))
    its = list(range(0, 50, 5))
    assert run.get("loss").steps.tolist() == its
    assert run.get("loss").values.tolist() == pytest.approx([9 - it / 25 for it in its])
    assert run.get("step_time_s").values[-1] == pytest.approx(0.5 + 45 / 1000)


def test_nanogpt_iter_lines_and_eval_lines() -> None:
    run = load_run(str(DATA / "nanogpt_train.log"))
    its = list(range(0, 101, 10))
    assert run.get("loss").steps.tolist() == its
    want = [4.2 - it / 100 + 0.01 * (it % 20 == 0) for it in its]
    assert run.get("loss").values.tolist() == pytest.approx(want, abs=5e-5)
    assert run.get("val_loss").steps.tolist() == [0, 50, 100]
    assert run.get("step_time_s").values[1] == pytest.approx(0.04577)


def test_keras_csvlogger_file() -> None:
    run = load_run(str(DATA / "keras_csvlogger.csv"))
    assert run.get("loss").steps.tolist() == [0, 1, 2, 3, 4]
    assert run.get("loss").values.tolist() == pytest.approx([1.2 - 0.15 * e for e in range(5)])
    assert run.get("val_loss").values[-1] == pytest.approx(1.25 - 0.48 + 0.2)
    assert run.has("lr")


def test_keras_history_json_file() -> None:
    run = load_run(str(DATA / "keras_history.json"))
    assert run.get("loss").steps.tolist() == [1, 2, 3, 4, 5]  # epochs counted from 1
    assert run.get("val_loss").values.tolist() == pytest.approx([1.25 - 0.12 * e
                                                                 for e in range(5)])
    assert run.has("lr")


# -- the user's own pattern -------------------------------------------------------------------

NANOGPT = r"iter (?P<step>\d+): loss (?P<loss>[\d.]+), time (?P<step_time_ms>[\d.]+)ms"
OPENNMT = [r"Step\s+(?P<step>\d+)/.*; xent: (?P<loss>[\d.]+); lr: (?P<lr>[\d.e-]+)",
           r"Validation perplexity: (?P<val_ppl>[\d.]+)"]
MEGATRON = [r"iteration\s+(?P<step>\d+)/.*\| lm loss: (?P<loss>[\d.E+-]+)",
            r"validation loss at iteration (?P<step>\d+) \| lm loss value: (?P<val_loss>\S+)"]


def test_a_line_pattern_reads_only_what_its_groups_name() -> None:
    run = load_paths([str(DATA / "nanogpt_train.log")], line_pattern=NANOGPT)
    its = list(range(0, 101, 10))
    assert run.get("loss").steps.tolist() == its
    assert run.get("step_time_s").values[1] == pytest.approx(0.04577)
    assert not run.has("val_loss") and not run.has("mfu")  # not in the pattern
    assert any(n.kind == "line_pattern" and "11 lines matched" in n.detail for n in run.notes)


def test_a_stepless_pattern_takes_the_last_step_and_ppl_becomes_val_loss() -> None:
    run = load_paths([str(DATA / "opennmt_train.log")], line_pattern=OPENNMT)
    val = run.get("val_loss")
    assert val.steps.tolist() == [200, 400]
    assert val.values.tolist() == pytest.approx([6.2 - s / 200 for s in (200, 400)], abs=1e-3)
    assert run.get("loss").steps.tolist() == list(range(50, 401, 50))


def test_two_stepped_patterns_read_train_and_validation_lines() -> None:
    run = load_paths([str(DATA / "megatron_train.log")], line_pattern=MEGATRON)
    assert run.get("val_loss").steps.tolist() == [100]
    assert run.get("val_loss").values.tolist() == [6.2]
    assert len(run.get("loss")) == 10


def test_a_line_pattern_reads_a_layout_the_built_in_reader_does_not(tmp_path: Path) -> None:
    p = tmp_path / "odd.log"
    p.write_text("".join(f"@@ {k} ~ {1 / (k + 1):.4f} ~~\n" for k in range(20)))
    with pytest.raises(UnrecognizedInputError):
        load_run(str(p))
    run = load_paths([str(p)], line_pattern=r"@@ (?P<step>\d+) ~ (?P<loss>[\d.]+)")
    assert run.get("loss").values.tolist() == pytest.approx([1 / (k + 1) for k in range(20)],
                                                            abs=5e-5)


@pytest.mark.parametrize("pattern, what", [
    ("iter (?P<step>\\d+", "not a regular expression"),
    ("loss (?P<loss>[\\d.]+)", "no pattern has a (?P<step>...) group"),
    ("iter (?P<step>\\d+)", "names no metric group"),
])
def test_a_bad_pattern_is_a_config_error_naming_the_field(pattern: str, what: str) -> None:
    with pytest.raises(ConfigError, match=r"^line_pattern: .*" + re.escape(what)):
        load_paths([str(DATA / "nanogpt_train.log")], line_pattern=pattern)


def test_a_pattern_no_line_matches_names_the_pattern() -> None:
    with pytest.raises(UnrecognizedInputError, match="0 lines matched"):
        load_paths([str(DATA / "nanogpt_train.log")],
                   line_pattern=r"epoch (?P<step>\d+) acc (?P<acc>[\d.]+)")
