"""One gloo case regenerated live under torchrun (the committed gloo_*.log files come from the
same script, tests/explain/make_gloo_logs.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from trainmedic.explain import explain_log

SCRIPT = Path(__file__).with_name("make_gloo_logs.py")


def test_a_rank_that_raises_is_named_as_the_root(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_gloo_logs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    log = module.launch("raise", tmp_path)
    report = explain_log(log)
    root = report.root_incident
    assert root is not None and root.code == "python_exception" and root.rank == 1
    assert root.fields["exception"] == "ValueError"
    child = [i for i in report.incidents if i.code == "torchrun_child_failed"]
    assert len(child) == 1 and child[0].fields["failed_rank"] == 1
