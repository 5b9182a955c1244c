"""training_state: RNG and data position survive torch.save / torch.load(weights_only=True), and
restoring them continues every stream exactly where the uninterrupted process would be.

The oracle is always the uninterrupted continuation itself: draw on from the saved point in
the same process, then restore in a perturbed state and compare what is drawn.
"""

from __future__ import annotations

import io
import random
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from trainmedic.checkpoint import training_state as ts  # noqa: E402
from trainmedic.checkpoint.training_state import LoopState  # noqa: E402
from trainmedic.errors import ConfigError, InputError  # noqa: E402
from trainmedic.recipe.loader_state import LoaderPosition  # noqa: E402


def roundtrip(obj: Any) -> Any:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def draws() -> list[float]:
    """One value from every global stream (gauss exercises python's cached second value)."""
    return [random.random(), random.gauss(0, 1), float(np.random.rand()),
            float(np.random.standard_normal()), float(torch.rand(()))]


def perturb() -> None:
    random.seed(12345)
    np.random.seed(777)
    torch.manual_seed(4242)


def test_rng_round_trip_continues_every_stream() -> None:
    perturb()
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    np.random.standard_normal()
    state = roundtrip(ts.capture_rng())
    expected = [draws() for _ in range(3)]
    perturb()
    ts.restore_rng(state)
    assert [draws() for _ in range(3)] == expected


def test_capture_is_plain_and_names_a_bad_value() -> None:
    loop = LoopState(step=3, epoch=1, batches_in_epoch=2, samples_seen=40, tokens_seen=0)
    got = roundtrip(ts.capture(loop, config_hash="abc", extra={"gen": torch.ones(2)}))
    assert got["format"] == ts.FORMAT and got["counters"]["step"] == 3
    assert got["world_size"] == 1 and got["rank"] == 0 and got["rng"]["cuda"] == []
    with pytest.raises(ConfigError, match=r"extra\.bad is a ndarray"):
        ts.capture(loop, extra={"bad": np.zeros(2)})
    with pytest.raises(ConfigError, match=r"train\.x\[1\] is a object"):
        ts.check_plain({"x": [1, object()]})


def test_cuda_states_are_captured_and_restored_per_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    states = [torch.full((16,), i, dtype=torch.uint8) for i in range(3)]
    restored: dict[int, Any] = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: list(states))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda s, device: restored.__setitem__(device, s.clone()))
    got = ts.capture_rng()
    assert [s.tolist() for s in got["cuda"]] == [s.tolist() for s in states]
    ts.restore_rng(roundtrip(got))
    assert sorted(restored) == [0, 1, 2]
    assert all(restored[i].tolist() == states[i].tolist() for i in range(3))
    # Fewer devices on resume: the first ones are restored, with a warning.
    restored.clear()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ts.restore_rng(got)
    assert sorted(restored) == [0, 1]


def make_loader(*, generator: bool, n: int = 24, batch: int = 4) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(5) if generator else None
    return DataLoader(TensorDataset(torch.arange(n)), batch_size=batch, shuffle=True,
                      generator=g)


def train_like(pos: LoaderPosition, steps: int) -> list[Any]:
    """Draw batches with a dropout-like global draw after each, as a training step would."""
    out = []
    for _ in range(steps):
        (b,) = pos.next_batch()
        out.append((b.tolist(), float(torch.rand(())), random.random()))
    return out


@pytest.mark.parametrize("generator", [True, False])
@pytest.mark.parametrize("at", [3, 6, 8])  # mid-epoch, at the epoch's end, in the next one
def test_restore_continues_data_and_rng(generator: bool, at: int) -> None:
    torch.manual_seed(0)
    random.seed(0)
    loop = LoopState()
    pos = LoaderPosition(make_loader(generator=generator), loop)
    train_like(pos, at)
    saved = roundtrip(ts.capture(loop, loader=pos))
    expected = train_like(pos, 9)
    perturb()
    loop2 = LoopState()
    pos2 = LoaderPosition(make_loader(generator=generator), loop2)
    ts.restore(saved, loop2, loader=pos2)
    # 6 batches an epoch; at its end the next epoch starts only with the next batch.
    assert (loop2.epoch, loop2.batches_in_epoch) == {3: (0, 3), 6: (0, 6), 8: (1, 2)}[at]
    assert train_like(pos2, 9) == expected


@pytest.mark.parametrize(("sabotage", "generator", "at"), [
    ("rng", False, 3), ("data", False, 3),
    # Without a loader generator, iterator creation draws from the global torch RNG: the
    # trap "RNG restored before the iterator" then shows.
    ("rng-before-data", False, 3),
    # The loader's generator as built: matters from the second epoch (6 batches an epoch).
    ("generator", True, 8),
])
def test_each_sabotage_breaks_the_continuation(sabotage: str, generator: bool,
                                               at: int) -> None:
    torch.manual_seed(0)
    loop = LoopState()
    pos = LoaderPosition(make_loader(generator=generator), loop)
    train_like(pos, at)
    saved = roundtrip(ts.capture(loop, loader=pos))
    expected = train_like(pos, 5)
    perturb()
    loop2 = LoopState()
    pos2 = LoaderPosition(make_loader(generator=generator), loop2)
    ts.restore(saved, loop2, loader=pos2, sabotage=sabotage)
    assert train_like(pos2, 5) != expected


def test_worker_rng_is_reproduced_through_the_base_seed() -> None:
    class Noisy(Dataset[Any]):
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> Any:
            return torch.tensor([i, int(torch.randint(0, 10**6, ()))])

    def loader() -> DataLoader[Any]:
        return DataLoader(Noisy(), batch_size=2, shuffle=True, num_workers=2,
                          generator=torch.Generator().manual_seed(1))

    torch.manual_seed(0)
    loop = LoopState()
    pos = LoaderPosition(loader(), loop)
    [pos.next_batch() for _ in range(11)]  # 8 batches an epoch: 3 into the second
    saved = roundtrip(ts.capture(loop, loader=pos))
    expected = [pos.next_batch().tolist() for _ in range(7)]  # into the third
    perturb()
    loop2 = LoopState()
    pos2 = LoaderPosition(loader(), loop2)
    ts.restore(saved, loop2, loader=pos2)
    assert [pos2.next_batch().tolist() for _ in range(7)] == expected


class FakeStatefulLoader:
    """Duck-typed torchdata StatefulDataLoader: yields 0..n-1 per epoch from an offset it
    saves; counts every item it produces, so a replay would show."""

    def __init__(self, n: int = 5) -> None:
        self.n = n
        self.offset = 0
        self.produced = 0
        self.loaded: Any = None

    def __iter__(self) -> Any:
        start, self.offset = self.offset, 0
        for i in range(start, self.n):
            self.produced += 1
            self.offset = i + 1
            yield torch.tensor([i])
        self.offset = 0

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self.offset}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.loaded = sd
        self.offset = int(sd["offset"])


def test_stateful_loader_saves_its_own_state_and_is_not_replayed() -> None:
    loop = LoopState()
    pos = LoaderPosition(FakeStatefulLoader(), loop)
    assert pos.stateful
    got = [int(pos.next_batch()) for _ in range(3)]
    saved = roundtrip(ts.capture(loop, loader=pos))
    assert saved["data"]["kind"] == "stateful" and saved["data"]["loader"] == {"offset": 3}
    expected = [int(pos.next_batch()) for _ in range(4)]
    assert got + expected == [0, 1, 2, 3, 4, 0, 1]
    fresh = FakeStatefulLoader()
    loop2 = LoopState()
    pos2 = LoaderPosition(fresh, loop2)
    ts.restore(saved, loop2, loader=pos2)
    assert fresh.loaded == {"offset": 3} and fresh.produced == 0
    assert [int(pos2.next_batch()) for _ in range(4)] == expected
    assert loop2.epoch == 1


def test_a_stateful_loader_state_that_is_not_plain_is_refused() -> None:
    class Bad(FakeStatefulLoader):
        def state_dict(self) -> dict[str, Any]:
            return {"sampler": object()}

    pos = LoaderPosition(Bad(), LoopState())
    with pytest.raises(ConfigError, match=r"data\.state_dict\(\)\.sampler"):
        ts.capture(LoopState(), loader=pos)


def test_world_size_change_is_refused_unless_told() -> None:
    torch.manual_seed(0)
    loop = LoopState()
    pos = LoaderPosition(make_loader(generator=True), loop)
    train_like(pos, 3)
    loop.step = 3
    saved = roundtrip(ts.capture(loop, loader=pos))
    saved["world_size"] = 2
    loop2 = LoopState()
    with pytest.raises(ConfigError, match=r"world_size: .*saved by 2 rank\(s\), this run has 1"):
        ts.restore(saved, loop2, loader=LoaderPosition(make_loader(generator=True), loop2))
    perturb()
    before = torch.get_rng_state()
    pos2 = LoaderPosition(make_loader(generator=True), loop2)
    ts.restore(saved, loop2, loader=pos2, on_resize="restart_epoch")
    assert (loop2.step, loop2.epoch, loop2.batches_in_epoch) == (3, 0, 0)
    assert torch.equal(torch.get_rng_state(), before)  # the RNG is left as seeded
    first = [pos2.next_batch()[0].tolist() for _ in range(6)]
    assert sorted(sum(first, [])) == list(range(24))  # the whole epoch, from its start
    with pytest.raises(ConfigError, match="on_resize"):
        ts.restore(saved, loop2, on_resize="guess")


def test_config_hash_and_format_are_checked() -> None:
    saved = roundtrip(ts.capture(LoopState(step=2), config_hash="aaaa"))
    with pytest.raises(ConfigError, match="config_hash: .*aaaa.*bbbb"):
        ts.restore(saved, LoopState(), config_hash="bbbb")
    loop = LoopState()
    ts.restore(saved, loop, config_hash="bbbb", force=True)
    assert loop.step == 2
    with pytest.raises(InputError, match="format"):
        ts.restore({"format": "other/9"}, LoopState())
