"""The sitecustomize ``dist watch`` puts first on the job's PYTHONPATH: it runs the user's own
sitecustomize exactly once (a module or a package), says an error in it without breaking the
process, and two hooks (a dist watch inside another) do not run each other forever."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from trainmedic.dist.supervisor import _write_hook


def _run(pythonpath: list[pathlib.Path]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAINMEDIC_HANG_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return subprocess.run([sys.executable, "-c", "print('main')"], env=env, text=True,
                          capture_output=True, timeout=60)


def test_a_users_sitecustomize_package_runs_once_behind_two_hooks(tmp_path: pathlib.Path) -> None:
    hook_a, hook_b, user = tmp_path / "a", tmp_path / "b", tmp_path / "user"
    for h in (hook_a, hook_b):
        h.mkdir()
        _write_hook(str(h))
    pkg = user / "sitecustomize"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import helper\nprint('user', helper.X)\n")
    (pkg / "helper.py").write_text("X = 42\n")
    done = _run([hook_b, hook_a, user])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["user 42", "main"]
    assert "Error" not in done.stderr


def test_an_error_in_the_users_sitecustomize_is_said_and_the_job_runs(
        tmp_path: pathlib.Path) -> None:
    hook, user = tmp_path / "hook", tmp_path / "user"
    hook.mkdir()
    user.mkdir()
    _write_hook(str(hook))
    (user / "sitecustomize.py").write_text("raise ValueError('boom')\n")
    done = _run([hook, user])
    assert done.returncode == 0 and done.stdout.strip() == "main"
    assert "Error in sitecustomize" in done.stderr and "ValueError: boom" in done.stderr
