"""``import trainmedic``: a small, sorted public surface, loaded lazily (no torch, no numpy)."""

from __future__ import annotations

import subprocess
import sys

import trainmedic
import trainmedic.errors


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert trainmedic.__all__ == sorted(trainmedic.__all__)
    for name in trainmedic.__all__:
        assert getattr(trainmedic, name) is not None, name
    assert set(trainmedic.__all__) <= set(dir(trainmedic))


def test_every_public_error_is_exported() -> None:
    for name in trainmedic.errors.__all__:
        assert getattr(trainmedic, name) is getattr(trainmedic.errors, name)


def test_the_things_a_user_touches_are_there() -> None:
    want = {"load_run", "Run", "diagnose_run", "Diagnosis", "Finding", "watch", "WatchConfig",
            "Recipe", "RecipeRunner", "CheckpointManager"}
    assert want <= set(trainmedic.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        trainmedic.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_is_light() -> None:
    code = ("import sys, trainmedic; print(sorted(m for m in ('torch', 'numpy', 'pyarrow') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_diagnose_run_reads_and_diagnoses(tmp_path) -> None:
    p = tmp_path / "metrics.csv"
    p.write_text("step,loss\n" + "".join(f"{s},{2.0 / (1 + s / 50)}\n" for s in range(200)))
    d = trainmedic.diagnose_run(str(p))
    assert isinstance(d, trainmedic.Diagnosis) and d.loss_found


def test_lazy_names_are_all_public() -> None:
    assert set(trainmedic._LAZY) <= set(trainmedic.__all__)


def test_module_names_do_not_shadow_the_functions_they_hold() -> None:
    # trainmedic.memory.measure and .plan are the functions (their modules are `measurement`
    # and `planner`, nouns); trainmedic.demo.recipe the function (its module is `char_recipe`)
    import trainmedic.demo
    import trainmedic.memory
    import trainmedic.memory.measurement  # noqa: F401 - importing it must not rebind the name
    import trainmedic.memory.planner  # noqa: F401

    for fn in (trainmedic.memory.measure, trainmedic.memory.plan):
        assert callable(fn) and not isinstance(fn, type(trainmedic))
    assert callable(trainmedic.demo.recipe) and not isinstance(
        trainmedic.demo.recipe, type(trainmedic))


def test_watch_is_the_function_and_importing_the_watcher_does_not_rebind_it() -> None:
    import trainmedic.live
    import trainmedic.live.watcher  # noqa: F401 - importing it must not rebind the name

    assert trainmedic.watch is trainmedic.live.watch
    assert callable(trainmedic.watch) and not isinstance(trainmedic.watch, type(trainmedic))
