"""The last pass of name resolution: names no alias lists, read word by word.

Runs after the user's mapping, canonical names and the alias table have taken their columns.
Each remaining name is read by ``vocabulary.read_name``; for each canonical metric the best
reading wins: a name without namespace before a namespaced one, ``loss`` before ``nll_loss``,
a plain series before Lightning's ``_epoch`` copy, a train side before no side, and a
validation side before a test side (``test_loss`` is the eval loss only when no val loss
exists). Eval sets each get their own series (``val_loss/<set>``), and a generator/
discriminator pair is read as a GAN's objective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmedic.run.vocabulary import (
    ACC_WORDS,
    DISC_LOSS,
    GEN_LOSS,
    TEST_SIDE,
    VAL_SIDE,
    NameReading,
    read_name,
    split_camel,
    unit_label,
)

if TYPE_CHECKING:
    from trainmedic.run.names import NameResolution

__all__ = ["guess_names"]


#: A name starting with one of these is an evaluation's or a running record ("best_loss",
#: fairseq's best validation loss so far), never the training loss.
_NOT_TRAIN = ("val", "valid", "eval", "test", "dev", "best", "min", "lowest", "target")


#: Leaf endings that name a loss by its formula ("task_mse", "recon_nll", "cls_ce").
_LOSS_SUFFIXES = ("_mse", "_nll", "_ce", "_xent", "_bce")


def _eval_side(key: str) -> bool:
    """Whether a namespace part of ``key`` says evaluation ("val/task_mse", "eval/...",
    "valid_metrics/...")."""
    parts = key.replace(".", "/").split("/")[:-1]
    return any(p.split("_")[0] in VAL_SIDE | TEST_SIDE for p in parts)


#: Words of scores and counters, never the objective, after a "train" side word.
_NOT_OBJECTIVE = ACC_WORDS | frozenset({
    "f1", "auc", "iou", "miou", "map",
    "precision", "recall", "bleu", "rouge", "psnr", "ssim", "samples", "steps", "step",
    "epoch", "epochs", "batch", "batches", "time", "runtime", "speed", "throughput", "size",
    "tokens", "examples", "lr", "mem", "memory", "count", "n", "num", "ppl", "perplexity",
    "wer", "cer", "err", "error", "reward", "return", "score",
})


def _unknown_train_word(key: str) -> bool:
    """``train_<word>`` (``train/<word>``, ``training_<word>``) whose word is one short token
    naming no score or counter."""
    parts = key.replace("/", "_").replace(".", "_").replace("-", "_").split("_")
    return len(parts) == 2 and parts[0] in ("train", "training") and \
        parts[1].isalpha() and parts[1] not in _NOT_OBJECTIVE


def _sideless(leaf: str) -> str:
    """A leaf name without a leading side word ("train_tree_nll", "val_tree_nll" ->
    "tree_nll")."""
    head, _, rest = leaf.lower().partition("_")
    return rest if rest and head in ("train", "training", *VAL_SIDE, *TEST_SIDE) \
        else leaf.lower()


def _leaf(key: str) -> str:
    return key.replace(".", "/").split("/")[-1].replace(" ", "_").replace("-", "_")


def guess_names(res: NameResolution, present: dict[str, str]) -> None:
    """Fill ``res`` (a ``names.NameResolution``) from ``present`` (``{lower key: raw}``,
    the names no earlier rule took)."""
    taken = set(res.aliases.values())
    for parts in res.derived.values():
        taken.update(parts)
    free = {k: raw for k, raw in present.items() if raw not in taken}

    _gan_pair(res, free)
    readings: list[tuple[str, str, NameReading]] = []
    for key, raw in free.items():
        if raw in res.aliases.values():
            continue
        r = read_name(key)
        if r is None and raw != key:
            # camelCase words are lost in the lower-case key ("valLoss" -> "valloss")
            r = read_name(split_camel(raw).lower())
        if r is not None:
            readings.append((key, raw, r))

    _val_losses(res, readings)
    _train_loss(res, readings, free)
    for canonical in sorted({r.canonical for _, _, r in readings} - {"loss", "val_loss"}):
        cands = [(k, raw, r) for k, raw, r in readings if r.canonical == canonical
                 and raw not in res.aliases.values()]
        if not cands:
            continue
        direct = [c for c in cands if not c[2].invert]
        if canonical not in res.aliases and direct:
            k, raw, r = min(direct, key=lambda c: (c[2].namespaced, c[2].group != "",
                                                   c[2].agg, len(c[0]), c[0]))
            _take(res, canonical, raw, r)
        inv = [c for c in cands if c[2].invert]
        if inv and canonical not in res.aliases:
            res.inverted[canonical] = min(inv, key=lambda c: (len(c[0]), c[0]))[1]


def _take(res: NameResolution, canonical: str, raw: str, r: NameReading) -> None:
    res.aliases[canonical] = raw
    res.families[canonical] = "vocabulary"
    unit = unit_label(r)
    if unit:
        res.how[canonical] = unit
        if r.factor != 1.0:
            res.scales[canonical] = r.factor
    else:
        res.how[canonical] = "namespace" if r.namespaced else "alias"


def _gan_pair(res: NameResolution, free: dict[str, str]) -> None:
    if "loss" in res.aliases or "loss" in res.derived:
        return
    gens = sorted((k, raw) for k, raw in free.items() if _leaf(k) in GEN_LOSS)
    discs = sorted((k, raw) for k, raw in free.items() if _leaf(k) in DISC_LOSS)
    if not gens or not discs:
        return
    res.aliases["loss"] = gens[0][1]
    res.families["loss"] = "gan"
    res.how["loss"] = "alias"
    if "d_loss" not in res.aliases and discs[0][1] != "d_loss":
        res.aliases["d_loss"] = discs[0][1]
        res.families["d_loss"] = "gan"
        res.how["d_loss"] = "alias"
    res.meta["objective"] = "adversarial"


def _val_losses(res: NameResolution, readings: list[tuple[str, str, NameReading]]) -> None:
    cands = [c for c in readings if c[2].canonical == "val_loss"]
    if not cands:
        return
    if any(c[2].side == "val" for c in cands) or "val_loss" in res.aliases:
        cands = [c for c in cands if c[2].side != "test"]

    def rank(c: tuple[str, str, NameReading]) -> tuple:
        return (c[2].word_rank, c[2].agg, c[2].namespaced, len(c[0]), c[0])

    plain = [c for c in cands if not c[2].group]
    groups: dict[str, list[tuple[str, str, NameReading]]] = {}
    for c in cands:
        if c[2].group and c[2].word_rank == 0:
            groups.setdefault(c[2].group, []).append(c)
    order = sorted(groups)
    if "val_loss" not in res.aliases:
        if plain:
            k, raw, r = min(plain, key=rank)
            _take(res, "val_loss", raw, r)
        elif order:
            k, raw, r = min(groups[order[0]], key=rank)
            _take(res, "val_loss", raw, r)
            res.how["val_loss"] = f"namespace (eval set {order[0]}; first of {len(order)})"
            order = order[1:]
    for g in order:
        name = f"val_loss/{g}"
        if name in res.aliases:
            continue
        k, raw, r = min(groups[g], key=rank)
        if raw in res.aliases.values():
            continue
        _take(res, name, raw, r)
        res.how[name] = f"namespace (eval set {g})"


def _train_loss(res: NameResolution, readings: list[tuple[str, str, NameReading]],
                free: dict[str, str]) -> None:
    if "loss" in res.aliases or "loss" in res.derived:
        return
    # (a raw column is read once: a W&B export's "<run> - val/ce" is also present as
    # "val/ce", and the validation side may have taken it)
    cands = [c for c in readings if c[2].canonical == "loss" and c[1] not in
             res.aliases.values()]
    if cands:
        k, raw, r = min(cands, key=lambda c: (c[2].group != "", c[2].word_rank, c[2].agg,
                                              c[2].side not in ("train", ""),
                                              c[2].namespaced, len(c[0]), c[0]))
        _take(res, "loss", raw, r)
        return
    # Two models side by side ("cls_loss" beside "cls_val_loss"): each eval group's train
    # loss is "<group>_loss"; the first group's is the loss, the others "loss/<group>".
    groups = sorted({r.group for _, _, r in readings if r.canonical == "val_loss" and r.group})
    first = True
    for g in groups:
        src = free.get(f"{g}_loss")
        if src is None or src in res.aliases.values():
            continue
        name = "loss" if first else f"loss/{g}"
        res.aliases[name] = src
        res.families[name] = "vocabulary"
        res.how[name] = f"namespace (model {g})"
        first = False
    if first and "loss" not in res.aliases:
        # One column named "<something>_loss" (or "_mse", "_nll": "train/task_mse") and no
        # other loss at all on the training side (MXNet's "MultiLogisticLoss", a script's
        # "focal_loss"): the objective, whatever its name; its evaluation twin under a
        # validation namespace is the validation loss. Several ("box_loss", "obj_loss",
        # "loss_cls") are terms of it: none is taken.
        # ("amp/loss_scale" reads as loss_scale: another metric, not a second loss)
        other = {k for k, _, r in readings if r.canonical not in ("loss", "val_loss")}
        lossy = [(k, raw) for k, raw in free.items() if raw not in res.aliases.values()
                 and k not in other
                 and ("loss" in _leaf(k) or _leaf(k).endswith(_LOSS_SUFFIXES))
                 and not _leaf(k).startswith(_NOT_TRAIN) and not _eval_side(k)]
        if len(lossy) == 1 and _leaf(lossy[0][0]).endswith(("loss", *_LOSS_SUFFIXES)):
            res.aliases["loss"] = lossy[0][1]
            res.families["loss"] = "vocabulary"
            res.how["loss"] = "the only column named as a loss"
            word = _sideless(_leaf(lossy[0][0]))  # "train_tree_nll" and "val_tree_nll"
            twin = [raw for k, raw in free.items() if _sideless(_leaf(k)) == word
                    and (_eval_side(k) or _leaf(k).lower().split("_")[0] in
                         VAL_SIDE | TEST_SIDE) and raw not in res.aliases.values()]
            if len(twin) == 1 and "val_loss" not in res.aliases:
                res.aliases["val_loss"] = twin[0]
                res.families["val_loss"] = "vocabulary"
                res.how["val_loss"] = "the training loss's name on the validation side"
            return
        # Still none: one training-side column whose word names no metric we know ("Train_rf
        # 4.856e-01" of a callback printing its objective under the model's own name) is the
        # objective; a score (accuracy, F1, mAP) is not.
        train_side = [(k, raw) for k, raw in free.items() if raw not in res.aliases.values()
                      and k not in other and _unknown_train_word(k)]
        if len(train_side) == 1:
            res.aliases["loss"] = train_side[0][1]
            res.families["loss"] = "vocabulary"
            res.how["loss"] = "the only training-side column, a word no metric uses"

