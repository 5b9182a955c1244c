"""``trainmedic.bench.data``: the loader grid of a tiny DataLoader recipe, one row for a plain
iterable, and how samples are counted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainmedic.bench.data import DataBenchConfig, batch_samples, bench_data, default_workers
from trainmedic.errors import ConfigError

RECIPE = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainmedic.recipe import Recipe


def _recipe(data):
    model = torch.nn.Linear(4, 2)
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  loss_fn=lambda m, b: m(b[0]).pow(2).mean(), data=data)


def loader(batch_size=5, shuffle=True):
    ds = TensorDataset(torch.randn(37, 4), torch.randint(0, 2, (37,)))
    return _recipe(DataLoader(ds, batch_size=batch_size, shuffle=shuffle, drop_last=False))


def plain(n=6):
    return _recipe([(torch.randn(3, 4), torch.zeros(3)) for _ in range(n)])
'''


@pytest.fixture()
def recipe_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_recipe.py"
    path.write_text(RECIPE)
    return path


def test_a_dataloader_recipe_gets_one_row_per_setting(recipe_file: Path) -> None:
    config = DataBenchConfig(batches=3, workers=(0, 1), pin_memory=(False,),
                             prefetch_factors=(2, 3))
    r = bench_data(f"{recipe_file}:loader", config, overrides={"batch_size": 4})
    settings = [(row.num_workers, row.pin_memory, row.prefetch_factor) for row in r.rows]
    assert settings == [(0, False, None), (1, False, 2), (1, False, 3)]
    assert r.grid_run and r.kind == "DataLoader"
    for row in r.rows:
        assert row.batches == 3 and row.samples == 12  # the --set batch_size reached the loader
        assert row.samples_per_s == pytest.approx(row.samples / row.elapsed_s)
        assert row.batches_per_s == pytest.approx(row.batches / row.elapsed_s)
        assert row.startup_s > 0
    assert r.best.samples_per_s == max(row.samples_per_s for row in r.rows)
    assert [row.recipe_setting for row in r.rows] == [True, False, False]
    assert r.to_dict()["basis"] == "measured"


def test_a_short_epoch_is_said(recipe_file: Path) -> None:
    # 37 samples in batches of 10: 4 batches, the first timed apart, so 3 timed of 20 asked
    r = bench_data(f"{recipe_file}:loader",
                   DataBenchConfig(batches=20, workers=(0,), pin_memory=(False,)),
                   overrides={"batch_size": 10, "shuffle": False})
    assert r.rows[0].batches == 3 and r.rows[0].samples == 10 + 10 + 7
    assert any("epoch ended" in n for n in r.notes)


def test_a_plain_iterable_gets_one_row_and_the_reason(recipe_file: Path) -> None:
    r = bench_data(f"{recipe_file}:plain", DataBenchConfig(batches=4, workers=(0, 1, 2)))
    assert not r.grid_run and r.kind == "list" and len(r.rows) == 1
    row = r.rows[0]
    assert row.num_workers is None and row.batches == 4 and row.samples == 12
    assert any("not a torch DataLoader" in n for n in r.notes)


def test_pin_memory_without_cuda_is_explained(recipe_file: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("the note is about a machine without CUDA")
    r = bench_data(f"{recipe_file}:loader", DataBenchConfig(batches=2, workers=(0,)))
    assert [row.pin_memory for row in r.rows] == [False]
    assert any("pin_memory only helps" in n for n in r.notes)


def test_helpers() -> None:
    assert default_workers(2) == (0, 1, 2)
    assert default_workers(1) == (0, 1)
    assert default_workers(16) == (0, 1, 2, 4)
    assert batch_samples((torch.zeros(7, 3), torch.zeros(7)), 99) == 7
    assert batch_samples({"x": [torch.zeros(5, 2)]}, 99) == 5
    assert batch_samples("text", 99) == 99
    with pytest.raises(ConfigError, match="^workers"):
        DataBenchConfig(workers=(-1,))
    with pytest.raises(ConfigError, match="^batches"):
        DataBenchConfig(batches=0)
