"""Detection by content, folders, ranks, merging, user mappings, bad inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import (
    InputError,
    TrainmedicError,
    UnreadableInputError,
    UnrecognizedInputError,
)
from trainmedic.run import Run, load_run
from trainmedic.run.loader import detect_format, rank_of

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = DATA / "logs"
DEVLOGS = DATA / "devlogs"


def write(p: Path, text: str | bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


@pytest.mark.parametrize(("name", "fmt"), [
    ("lightning_sparse.csv", "csv"),
    ("bom_tab.tsv", "csv"),
    ("detectron2_metrics.json", "jsonl"),
    ("nested.jsonl", "jsonl"),
    ("hf_trainer_state.json", "json"),
    ("junk.bin", None),
])
def test_detect_format(name, fmt):
    assert detect_format(LOGS / name) == fmt


def test_trainer_state_found_under_any_name(tmp_path):
    p = tmp_path / "__init__.py"
    shutil.copy(DEVLOGS / "hf-qa-chance" / "state.dat", p)
    run = load_run(str(p))
    assert len(run.get("loss")) == 62 and len(run.get("val_loss")) == 62
    assert run.meta["sources"][0]["format"] == "hf_trainer_state"


def test_aliases_meta_and_derived():
    run = load_run(str(LOGS / "yolo_padded.csv"))
    assert run.meta["aliases"] == {"lr": "lr/pg0"}
    assert run.meta["derived"]["loss"] == "sum of train/box_loss + train/cls_loss + train/dfl_loss"
    np.testing.assert_allclose(run.get("loss").values[0], 1.6878 + 3.3859 + 2.143)
    assert run.get("loss").steps.tolist() == [0, 1, 2]
    assert run.has("train/box_loss")  # components stay under their raw names


def test_hf_state_maps_and_keeps_meta():
    run = load_run(str(LOGS / "hf_trainer_state.json"))
    assert run.get("loss").steps.tolist() == [5, 10, 15, 20]
    assert run.get("val_loss").values.tolist() == [2.2, 2.0]
    assert run.get("lr") is not None and run.get("grad_norm") is not None
    assert run.has("eval_accuracy")
    assert run.meta["max_steps"] == 20 and run.meta["eval_steps"] == 10


@pytest.mark.parametrize(("rel", "rank"), [
    ("metrics.rank1.csv", 1),
    ("rank_2/metrics.csv", 2),
    ("rank-3/sub/metrics.csv", 3),
    ("logs_rank12.csv", 12),
    ("metrics.csv", None),
    ("ranking/metrics.csv", None),
    ("run_1/attempt_0/3/stdout.log", 3),  # torchrun --log-dir: the local rank's folder
    ("run_1/epoch_0/3/stdout.log", None),
])
def test_rank_of(tmp_path, rel, rank):
    assert rank_of(tmp_path / rel, tmp_path) == rank


def test_folder_of_ranks_merges(tmp_path):
    for r in range(2):
        write(tmp_path / f"metrics.rank{r}.csv",
              "step,loss,step_time_s\n" + "".join(f"{s},{2 - s * 0.1},{0.1 + r}\n"
                                                  for s in range(5)))
    run = load_run(str(tmp_path))
    assert run.ranks() == [0, 1]
    assert run.get("step_time_s", 1).values[0] == pytest.approx(1.1)
    assert len(run.meta["sources"]) == 2


def test_rank_folder_given_directly(tmp_path):
    write(tmp_path / "rank_1" / "m.csv", "step,loss\n1,2\n")
    run = load_run(str(tmp_path / "rank_1"))
    assert run.ranks() == [1]


def test_folder_merges_formats_and_skips_non_logs(tmp_path):
    write(tmp_path / "train" / "metrics.csv", "step,loss\n1,2.0\n2,1.8\n")
    write(tmp_path / "eval.jsonl", '{"step": 2, "eval_loss": 2.1}\n')
    write(tmp_path / "predictions.csv", "id,label\n1,cat\n")
    write(tmp_path / "config.json", '{"hidden_size": 8}')
    write(tmp_path / "model.safetensors", b"\x00" * 100)
    write(tmp_path / "notes.md", "# hi")
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [1, 2]
    assert run.get("val_loss").values.tolist() == [2.1]
    assert not run.has("label")
    assert any(n.kind == "skipped_file" and "predictions.csv" in n.detail for n in run.notes)


def test_files_of_one_run_append_in_order(tmp_path):
    write(tmp_path / "version_0" / "metrics.csv", "step,loss\n1,3\n2,2.5\n3,2.2\n")
    write(tmp_path / "version_1" / "metrics.csv", "step,loss\n2,2.6\n3,2.1\n4,2.0\n")
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [1, 2, 3, 2, 3, 4]  # the resume stays visible


def test_same_data_in_two_sources_is_read_once(tmp_path):
    write(tmp_path / "a" / "metrics.csv", "step,loss\n1,3\n2,2.5\n3,2.2\n")
    write(tmp_path / "b" / "log.jsonl", "".join(json.dumps({"step": s, "train/loss": v}) + "\n"
                                                for s, v in ((1, 3), (2, 2.5), (3, 2.2))))
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [1, 2, 3]
    assert any(n.kind == "duplicate_source" for n in run.notes)


def test_hf_checkpoint_copies_are_superseded(tmp_path):
    doc = json.loads((LOGS / "hf_trainer_state.json").read_text())
    early = dict(doc, global_step=10, log_history=doc["log_history"][:3])
    write(tmp_path / "checkpoint-10" / "trainer_state.json", json.dumps(early))
    write(tmp_path / "checkpoint-20" / "trainer_state.json", json.dumps(doc))
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [5, 10, 15, 20]
    assert any(n.kind == "superseded_state" for n in run.notes)


def test_several_paths(tmp_path):
    a = write(tmp_path / "a.csv", "step,loss\n1,2\n")
    b = write(tmp_path / "b.csv", "step,val_loss\n1,2.5\n")
    run = load_run(str(a), str(b))
    assert run.has("loss") and run.has("val_loss")


def test_user_mapping(tmp_path):
    p = write(tmp_path / "m.csv", "step,loss,my/loss/tag\n1,9,2\n2,9,1\n")
    run = load_run(str(p), mapping={"loss": "my/loss/tag"})
    assert run.get("loss").values.tolist() == [2, 1]
    assert run.meta["aliases"]["loss"] == "my/loss/tag"


def test_user_mapping_unknown_source(tmp_path):
    p = write(tmp_path / "m.csv", "step,train/box_loss,val/box_loss\n1,2,3\n")
    with pytest.raises(InputError) as e:
        load_run(str(p), mapping={"loss": "train/box_los"})
    msg = str(e.value)
    assert str(p) in msg and "train/box_los" in msg and "train/box_loss" in msg
    assert "\n" not in msg


def test_user_mapping_found_in_another_file(tmp_path):
    write(tmp_path / "a.csv", "step,x\n1,2\n")
    write(tmp_path / "b.csv", "step,loss,special\n1,2,3\n")
    run = load_run(str(tmp_path), mapping={"val_loss": "special"})
    assert run.get("val_loss").values.tolist() == [3]


def test_folder_with_nothing_recognizable(tmp_path):
    write(tmp_path / "readme.md", "hello")
    write(tmp_path / "weights.pt", b"\x00\x01")
    write(tmp_path / "data.bin", b"\x00\x01\x02")
    with pytest.raises(UnrecognizedInputError) as e:
        load_run(str(tmp_path))
    assert "TensorBoard" in str(e.value) and "CSV" in str(e.value)


def test_binary_junk_file():
    with pytest.raises(UnrecognizedInputError, match="binary or unknown"):
        load_run(str(LOGS / "junk.bin"))


def test_missing_path(tmp_path):
    with pytest.raises(UnreadableInputError, match="does not exist"):
        load_run(str(tmp_path / "nope.csv"))


def test_empty_file_through_loader(tmp_path):
    p = write(tmp_path / "empty.csv", "")
    with pytest.raises(UnrecognizedInputError, match="empty"):
        load_run(str(p))


def test_unreadable_file(tmp_path, monkeypatch):
    p = write(tmp_path / "m.csv", "step,loss\n1,2\n")
    real_open = Path.open

    def deny(self, *a, **k):
        if self == p:
            raise PermissionError(13, "Permission denied")
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(UnreadableInputError, match="Permission denied"):
        load_run(str(p))


def test_every_error_is_one_line_naming_the_file(tmp_path):
    cases = [write(tmp_path / "e.csv", ""), LOGS / "junk.bin",
             write(tmp_path / "h.csv", "step,loss\n"), write(tmp_path / "j.jsonl", "{]\n")]
    for p in cases:
        with pytest.raises(TrainmedicError) as e:
            load_run(str(p))
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_store_file_delegates_to_store_module(tmp_path, monkeypatch):
    p = write(tmp_path / "run.rank3.db", b"SQLite format 3\x00" + b"\x00" * 100)
    fake = types.ModuleType("trainmedic.run.store")

    def read_store(path):
        run = Run(source=str(path))
        run.add("loss", [1, 2], [2.0, 1.0], rank=3)
        return run

    fake.is_store_file = lambda path: True  # type: ignore[attr-defined]
    fake.read_store = read_store  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainmedic.run.store", fake)
    import trainmedic.run as run_pkg
    monkeypatch.setattr(run_pkg, "store", fake, raising=False)
    run = load_run(str(p))
    assert run.ranks() == [3] and run.get("loss", 3).values.tolist() == [2.0, 1.0]
    assert detect_format(p) == "store"


def test_tensorboard_folder_with_keras_split_dirs(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    for sub, base in (("train", 2.0), ("validation", 2.5)):
        p = tmp_path / sub / "events.out.tfevents.1.host"
        p.parent.mkdir()
        with p.open("wb") as f:
            w = RecordWriter(f)
            for s in range(3):
                w.write(event_pb2.Event(step=s, summary=summary_pb2.Summary(value=[
                    summary_pb2.Summary.Value(tag="epoch_loss", simple_value=base - s)]))
                    .SerializeToString())
    run = load_run(str(tmp_path))
    assert run.get("loss").values.tolist() == [2.0, 1.0, 0.0]
    assert run.get("val_loss").values.tolist() == [2.5, 1.5, 0.5]


def test_import_does_not_pull_heavy_modules():
    code = ("import sys, trainmedic.run, trainmedic.run.loader, trainmedic.run.csvlog, "
            "trainmedic.run.jsonlog, trainmedic.run.hf_state, trainmedic.run.tbevents, "
            "trainmedic.run.names\n"
            "from trainmedic.run import load_run\n"
            f"load_run({str(LOGS / 'lightning_sparse.csv')!r})\n"
            "bad = [m for m in ('torch', 'pandas', 'tensorboard') if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""


def test_duplicate_sources_keep_steps_only_one_has(tmp_path):
    write(tmp_path / "a" / "metrics.csv", "step,loss\n" + "".join(f"{s},{s * 0.5}\n"
                                                                  for s in range(10)))
    write(tmp_path / "b" / "metrics.csv", "step,loss\n" + "".join(f"{s},{s * 0.5}\n"
                                                                  for s in range(2, 12)))
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == list(range(12))


def test_explicit_files_take_rank_from_their_folder(tmp_path):
    a = write(tmp_path / "rank_0" / "metrics.csv", "step,loss\n1,2\n")
    b = write(tmp_path / "rank_1" / "metrics.csv", "step,loss\n1,3\n")
    run = load_run(str(a), str(b))
    assert run.ranks() == [0, 1]
    assert run.get("loss", 1).values.tolist() == [3.0]


def test_real_run_store_folder(tmp_path):
    store = pytest.importorskip("trainmedic.run.store")
    for rank in (0, 1):
        with store.RunStore(tmp_path, rank=rank, world_size=2) as st:
            for s in range(4):
                st.log(s, {"loss": 2.0 - 0.1 * s + rank, "lr": 0.1})
    write(tmp_path / "extra.csv", "step,val_loss\n3,2.5\n")
    run = load_run(str(tmp_path))
    assert run.ranks() == [None, 0, 1]
    assert run.get("loss", 1).values.tolist() == pytest.approx([3.0, 2.9, 2.8, 2.7])
    assert run.get("val_loss").values.tolist() == [2.5]


def test_folder_whose_only_log_is_unreadable(tmp_path, monkeypatch):
    p = write(tmp_path / "metrics.csv", "step,loss\n1,2\n")
    real_open = Path.open

    def deny(self, *a, **k):
        if self == p:
            raise PermissionError(13, "Permission denied")
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(UnreadableInputError, match="metrics.csv"):
        load_run(str(tmp_path))


def test_store_file_without_store_module(tmp_path, monkeypatch):
    p = write(tmp_path / "metrics.sqlite", b"SQLite format 3\x00" + b"\x00" * 100)
    import trainmedic.run as run_pkg
    monkeypatch.setitem(sys.modules, "trainmedic.run.store", None)  # import raises ImportError
    monkeypatch.delattr(run_pkg, "store", raising=False)
    with pytest.raises(UnrecognizedInputError, match="SQLite"):
        load_run(str(p))


def test_a_bad_file_named_with_others_is_an_error(tmp_path):
    good = write(tmp_path / "a.csv", "step,loss\n1,2\n")
    bad = write(tmp_path / "b.csv", "")
    with pytest.raises(UnrecognizedInputError, match="b.csv"):
        load_run(str(good), str(bad))


def test_folder_skips_dataset_jsonl_but_reads_mmdet_log(tmp_path):
    write(tmp_path / "data" / "train.jsonl", '{"text": "hi", "label": 1}\n{"text": "x", '
          '"label": 0}\n')
    write(tmp_path / "work" / "log.json", '{"env_info": "cuda", "seed": 1}\n'
          '{"mode": "train", "epoch": 1, "iter": 50, "loss": 1.5, "lr": 0.01}\n')
    run = load_run(str(tmp_path))
    assert not run.has("label")
    assert run.get("loss").values.tolist() == [1.5]
    assert any(n.kind == "skipped_file" and "train.jsonl" in n.detail for n in run.notes)


def test_folder_skips_json_tables_that_are_not_logs(tmp_path):
    write(tmp_path / "m.csv", "step,loss\n1,2\n")
    write(tmp_path / "sizes.json", '{"width": [1, 2], "height": [3, 4]}')
    run = load_run(str(tmp_path))
    assert not run.has("width")


def test_trainmedic_checkpoint_folders_are_not_read_as_logs(tmp_path):
    # A run folder with checkpoints under it (trainmedic demo --checkpoint-every): the
    # checkpoint's manifest.json is JSON but not a log, and its .pt files are weights.
    (tmp_path / "metrics.csv").write_text("step,loss\n0,2.0\n1,1.5\n2,1.2\n")
    ck = tmp_path / "checkpoints" / "step-00000002"
    ck.mkdir(parents=True)
    (ck / "manifest.json").write_text('{"schema": "trainmedic.checkpoint/1", "step": 2}')
    other = tmp_path / "notes"
    other.mkdir()
    (other / "manifest.json").write_text('{"schema": "something-else", "step": 2}')
    run = load_run(tmp_path)
    assert run.get("loss").values.tolist() == [2.0, 1.5, 1.2]
    paths = [n.path or "" for n in run.notes]
    assert not any("step-00000002" in p for p in paths)
    assert any("notes" in (n.path or "") or "notes" in n.message for n in run.notes)


def test_a_log_with_only_perplexities_reads_their_log_as_the_loss(tmp_path) -> None:
    import math

    from trainmedic.run import load_run

    rows = "".join(f"{s},{math.exp(2.0 + 1.0 / s):.4f},{math.exp(2.3 + 1.0 / s):.4f}\n"
                   for s in range(1, 40))
    f = tmp_path / "log.csv"
    f.write_text("step,ppl,val_ppl\n" + rows)
    run = load_run(str(f))
    loss, val = run.get("loss"), run.get("val_loss")
    assert loss is not None and val is not None
    assert abs(float(loss.values[0]) - 3.0) < 1e-3 and abs(float(val.values[0]) - 3.3) < 1e-3
    how = {m["column"]: m["how"] for m in run.meta["mapping"]}
    assert how["ppl"] == "derived: loss = ln(ppl)"
    # A log that has a loss keeps it; the perplexity is not turned into a second one.
    g = tmp_path / "log2.csv"
    body = "".join(f"{s},{2.0 + 1.0 / s:.4f},{math.exp(2.0 + 1.0 / s):.4f}\n"
                   for s in range(1, 40))
    g.write_text("step,loss,ppl\n" + body)
    run2 = load_run(str(g))
    assert run2.meta["mapping"][1]["how"] != "derived: loss = ln(ppl)"
    assert "ppl" in run2.metrics()


def test_a_rank_column_splits_one_file_into_ranks(tmp_path):
    # both ranks' rows in one CSV (pd.concat of per-rank frames): a 'rank' column
    rows = [(r, i, 2.0 - i / 100, 0.010 + 0.006 * r) for r in (0, 1) for i in range(0, 60, 5)]
    p = tmp_path / "all_ranks.csv"
    p.write_text("rank,iteration,loss,step_time_s\n" + "".join(
        f"{r},{i},{loss},{t}\n" for r, i, loss, t in rows))
    run = load_run(str(p))
    assert run.ranks() == [0, 1]
    assert run.get("step_time_s", 1).values.tolist() == [0.016] * 12
    assert run.get("loss", 0).steps.tolist() == list(range(0, 60, 5))


def test_lightnings_per_parameter_grad_norms_are_per_layer_grad_norms(tmp_path):
    # lightning.pytorch.utilities.grad_norm(model, norm_type=2): grad_2.0_norm/<param name>
    p = tmp_path / "metrics.csv"
    p.write_text("step,train_loss,grad_2.0_norm/body.0.weight,grad_2.0_norm/body.0.bias,"
                 "grad_2.0_norm/head.weight,grad_2.0_norm_total\n" + "".join(
                     f"{i},{1.6 - i / 1000},4e-9,1e-9,0.5,0.5\n" for i in range(0, 50, 10)))
    run = load_run(str(p))
    assert run.get("layer/body.0/grad_norm").values.tolist() == [4e-9] * 5
    assert run.get("layer/head/grad_norm") is not None
    assert run.get("layer/body.0.bias/grad_norm") is None


def test_a_guild_run_store_is_walked_though_its_folder_is_hidden(tmp_path):
    # Guild AI keeps each run's stdout as .guild/runs/<id>/.guild/output
    out = tmp_path / ".guild" / "runs" / "6c1f0e7a" / ".guild"
    out.mkdir(parents=True)
    (out / "output").write_text("Training for 300 steps\n" + "".join(
        f"step: {s}\ntrain_tree_nll: {1.5 - s / 1000:.4f}\nlr: 0.01\n" +
        (f"val_tree_nll: {1.4 - s / 1000:.4f}\n" if s % 50 == 0 else "")
        for s in range(10, 310, 10)))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "log.csv").write_text("step,loss\n1,9\n2,9\n")
    run = load_run(str(tmp_path))
    assert len(run.get("loss")) == 30 and len(run.get("val_loss")) == 6


def test_polyaxon_event_files_and_submitit_task_logs_are_found(tmp_path):
    # Polyaxon: .polyaxon/<run>/events/metric/<name>.plx, one {"timestamp","step","metric"}
    # line per value; submitit: .submitit/<job>/<job>_<task>_log.out, one task per rank
    ev = tmp_path / "p" / ".polyaxon" / "b1f4" / "events" / "metric"
    ev.mkdir(parents=True)
    for name, f in (("train_ce", lambda s: 1.4 - s / 400), ("lr", lambda s: 0.003)):
        (ev / f"{name}.plx").write_text("".join(json.dumps(
            {"timestamp": "2025-12-02T09:00:00+00:00", "step": s, "metric": f(s)}) + "\n"
            for s in range(5, 305, 5)))
    run = load_run(str(tmp_path / "p"))
    assert len(run.get("loss")) == 60 and run.get("lr") is not None
    sub = tmp_path / "m" / ".submitit" / "48213"
    sub.mkdir(parents=True)
    for task in (0, 1):
        (sub / f"48213_{task}_log.out").write_text("".join(
            f"[2025-12-02 09:00:00,010][__main__][INFO] - it {s} | loss {1.0 - s / 400:.4f} | "
            f"lr 3.00e-03\n" for s in range(5, 305, 5)))
    assert load_run(str(tmp_path / "m")).ranks() == [0, 1]


def test_a_wandb_chart_export_of_the_validation_loss_alone_is_not_the_training_loss(tmp_path):
    d = tmp_path / "exports"
    d.mkdir()
    for key, f in (("train/ce", lambda s: 1.4 - s / 400), ("val/ce", lambda s: 1.3 - s / 400)):
        name = f"wandb_export_{key.replace('/', '_')}.csv"
        (d / name).write_text(f'"Step","run-7 - {key}","run-7 - {key}__MIN","run-7 - {key}__MAX"\n'
                              + "".join(f"{s},{f(s)},{f(s)},{f(s)}\n"
                                        for s in range(5 if key[0] == "t" else 50, 305,
                                                       5 if key[0] == "t" else 50)))
    run = load_run(str(d))
    assert run.get("loss").is_monotonic and len(run.get("val_loss")) == 6


def test_a_later_torchrun_attempt_continues_each_ranks_series(tmp_path):
    # torchrun --log-dir: attempt_1 holds the ranks' output after a restart whose step counter
    # went back to 0; it continues the series (the resume is there to judge), it is no second
    # sampling of them
    from trainmedic.diagnose import diagnose

    for attempt, steps in ((0, range(5, 185, 5)), (1, range(5, 125, 5))):
        for rank in (0, 1):
            d = tmp_path / "logs" / "a3f9_7q1k" / f"attempt_{attempt}" / str(rank)
            d.mkdir(parents=True)
            (d / "stdout.log").write_text("".join(
                f"[step {s}] loss={1.0 / (s + 5 * attempt):.4f} step_ms=7.1\n" for s in steps))
            (d / "stderr.log").write_text("")
    run = load_run(str(tmp_path))
    assert len(run.get("loss", 0)) == 36 + 24
    found = [f for f in diagnose(run).findings if f.symptom == "resume_discontinuity"]
    assert found and found[0].level >= 1
