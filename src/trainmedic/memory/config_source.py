"""Where a model's ``config.json`` comes from: a file, a model folder, or a hub id in the cache.

``resolve_config`` turns what a user typed after ``--config`` into a local file. A hub-style id
(``meta-llama/Llama-3.1-8B``) is looked up in the Hugging Face cache only (no download: a
plan must work offline), through ``huggingface_hub``, which ``transformers`` installs.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainmedic.errors import MissingExtraError, UnreadableInputError

__all__ = ["resolve_config", "looks_like_hub_id"]

CONFIG_NAME = "config.json"

# ``org/name`` or a legacy bare ``name`` (``gpt2``), as the hub validates repo ids.
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_like_hub_id(text: str) -> bool:
    """Whether ``text`` could be a hub repo id (and is not a file name such as ``x.json``)."""
    return bool(_HUB_ID_RE.match(text)) and not text.lower().endswith(".json")


def resolve_config(source: str | Path, *, cache_dir: str | Path | None = None) -> Path:
    """The ``config.json`` that ``source`` names.

    An existing file is itself; an existing folder gives its ``config.json``; otherwise a
    hub-style id gives the cached ``config.json`` of its ``main`` revision (``cache_dir``:
    the hub cache, default ``HF_HUB_CACHE``). Anything else is returned as a path, so that
    reading it fails with the usual message naming the file. Raises
    :class:`UnreadableInputError` for a hub id that is not cached, and
    :class:`MissingExtraError` when ``huggingface_hub`` is not installed.
    """
    path = Path(source)
    if path.is_dir():
        return path / CONFIG_NAME
    text = str(source)
    if path.exists() or not looks_like_hub_id(text):
        return path
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError as exc:
        raise MissingExtraError(
            f"{text}: no such file; reading a hub id from the local Hugging Face cache needs "
            "transformers: install the hf extra (pip install 'trainmedic[hf]'), or give the "
            "path of a config.json"
        ) from exc
    cached = try_to_load_from_cache(text, CONFIG_NAME, cache_dir=cache_dir)
    if isinstance(cached, str):
        return Path(cached)
    where = cache_dir if cache_dir is not None else constants.HF_HUB_CACHE
    raise UnreadableInputError(
        text, f"no such file, and no {CONFIG_NAME} for the hub id {text!r} in the Hugging Face "
        f"cache ({where}); give the path of a config.json, or fetch it first with "
        f"`hf download {text} {CONFIG_NAME}` (trainmedic does not download)"
    )
