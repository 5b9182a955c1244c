"""The demo's text: a synthetic English-like corpus, generated, so it has no copyright at all.

``corpus.txt`` in this package is exactly ``generate_corpus()`` (a test checks it), so anyone
can see where every character came from. The grammar is small on purpose: a tiny character
model learns its spelling and word order within a few hundred steps, which is what the demo
needs to show a healthy loss curve next to the faulty ones.
"""

from __future__ import annotations

import random
from functools import lru_cache
from importlib import resources

__all__ = ["generate_corpus", "load_corpus", "CORPUS_FILE"]

CORPUS_FILE = "corpus.txt"

_NAMES = ["the miller", "a sailor", "the old clerk", "my sister", "the baker", "a stranger",
          "the shepherd", "our teacher", "the captain", "a young farmer", "the weaver",
          "the river keeper", "a tired doctor", "the small boy", "the widow", "a merchant"]
_VERBS_T = ["found", "carried", "painted", "mended", "watched", "counted", "sold", "lost",
            "opened", "buried", "followed", "answered", "borrowed", "cleaned", "measured"]
_VERBS_I = ["slept", "waited", "laughed", "wandered", "sang", "listened", "worked",
            "rested", "prayed", "hurried", "stayed", "returned"]
_ADJS = ["green", "heavy", "quiet", "broken", "golden", "narrow", "ancient", "bright",
         "cold", "wooden", "crooked", "gentle", "empty", "silver", "muddy"]
_NOUNS = ["lamp", "boat", "letter", "garden", "bridge", "window", "basket", "fence",
          "bell", "coat", "ladder", "road", "kettle", "field", "door", "wagon", "map"]
_PLACES = ["by the mill", "near the harbour", "in the valley", "under the bridge",
           "at the market", "behind the church", "on the hill", "across the river",
           "inside the barn", "along the road"]
_TIMES = ["in the morning", "at noon", "before dawn", "after the storm", "every sunday",
          "late at night", "in the spring", "when the bells rang", "all winter"]
_CONJ = ["and", "but", "so", "while", "because"]


def _np(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return f"the {rng.choice(_ADJS)} {rng.choice(_NOUNS)}"
    return f"a {rng.choice(_NOUNS)}"


def _clause(rng: random.Random) -> str:
    subj = rng.choice(_NAMES)
    r = rng.random()
    if r < 0.5:
        core = f"{subj} {rng.choice(_VERBS_T)} {_np(rng)}"
    elif r < 0.8:
        core = f"{subj} {rng.choice(_VERBS_I)} {rng.choice(_PLACES)}"
    else:
        core = f"{subj} {rng.choice(_VERBS_T)} {_np(rng)} {rng.choice(_PLACES)}"
    if rng.random() < 0.3:
        core = f"{core} {rng.choice(_TIMES)}"
    return core


def _sentence(rng: random.Random) -> str:
    s = _clause(rng)
    if rng.random() < 0.35:
        s = f"{s}, {rng.choice(_CONJ)} {_clause(rng)}"
    end = "." if rng.random() < 0.85 else ("!" if rng.random() < 0.5 else "?")
    return s[0].upper() + s[1:] + end


def generate_corpus(n_chars: int = 120_000, seed: int = 1789) -> str:
    """Paragraphs of grammatical nonsense, deterministic for a given ``seed``."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < n_chars:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(3, 7)))
        parts.append(para)
        total += len(para) + 1
    return "\n".join(parts)[:n_chars] + "\n"


@lru_cache(maxsize=1)
def load_corpus() -> str:
    """The shipped corpus (falls back to generating it if the file is missing)."""
    try:
        return resources.files("trainmedic.demo").joinpath(CORPUS_FILE).read_text("utf-8")
    except (FileNotFoundError, OSError):
        return generate_corpus()
