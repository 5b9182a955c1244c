"""Where --config points: a file, a model folder, or a hub id in the local cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmedic.errors import MissingExtraError, UnreadableInputError
from trainmedic.memory.config_source import looks_like_hub_id, resolve_config

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


def _cache(root: Path, repo_id: str, revision: str = "0123abcd") -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "snapshots" / revision / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision / "config.json"


@pytest.mark.parametrize(("text", "hub"), [
    ("meta-llama/Llama-3.1-8B", True), ("gpt2", True), ("Qwen/Qwen2.5-0.5B", True),
    ("config.json", False), ("models/llama.json", False), ("a/b/c", False), ("./x", False),
    ("/abs/path", False), ("", False),
])
def test_hub_ids_are_told_from_paths(text: str, hub: bool) -> None:
    assert looks_like_hub_id(text) is hub


def test_a_file_a_folder_and_a_missing_json_stay_paths(tmp_path: Path) -> None:
    file = CONFIGS / "gpt2-large.json"
    assert resolve_config(file) == file
    assert resolve_config(str(tmp_path)) == tmp_path / "config.json"
    # Not a hub id: left for read_config to report as a missing file.
    assert resolve_config("missing.json", cache_dir=tmp_path) == Path("missing.json")


def test_a_cached_hub_id_gives_its_config(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    cached = _cache(tmp_path, "org/model")
    assert resolve_config("org/model", cache_dir=tmp_path) == cached


def test_an_uncached_hub_id_says_where_it_looked(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    with pytest.raises(UnreadableInputError) as err:
        resolve_config("org/other", cache_dir=tmp_path)
    assert str(err.value) == (
        f"org/other: no such file, and no config.json for the hub id 'org/other' in the Hugging "
        f"Face cache ({tmp_path}); give the path of a config.json, or fetch it first with "
        f"`hf download org/other config.json` (trainmedic does not download)")


def test_a_hub_id_without_huggingface_hub_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as uninstalled
    with pytest.raises(MissingExtraError, match=r"^org/model: no such file; .* needs "
                       r"transformers: install the hf extra \(pip install 'trainmedic\[hf\]'\)"):
        resolve_config("org/model", cache_dir=tmp_path)
