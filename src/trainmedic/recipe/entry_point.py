"""Resolve ``module:function`` or ``path/to/file.py:function`` to the callable it names.

The one loader behind every command that takes user code: recipes (``trainmedic ckpt
resume-test``), model factories (``trainmedic memory measure``). A module name is imported with
the current directory on ``sys.path``, as ``python -m`` would see it; a file is imported under a
stable module name (so that data-loader workers and pickling find it again). Every failure is a
one-line :class:`~trainmedic.errors.InputError` naming the spec and what was expected.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainmedic.errors import InputError, TrainmedicError, UnreadableInputError

__all__ = ["load_callable"]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def load_callable(spec: str, *, what: str = "function") -> Callable[..., Any]:
    """The callable ``spec`` names; ``what`` says what it should be, for messages.

    The part after ':' may be dotted (``module:Class.build``).
    """
    if not isinstance(spec, str):
        raise InputError(str(spec), f"expected a 'module:function' string naming the {what}")
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise InputError(spec, f"expected module:function or path/to/file.py:function naming "
                         f"the {what}")
    if target.endswith(".py") or os.sep in target or "/" in target:
        module = _import_file(spec, Path(target))
    else:
        module = _import_module(spec, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(spec, f"{target} has no attribute {attr!r}; expected the {what} "
                             "there (check the name after ':')")
        obj = getattr(obj, part)
    if not callable(obj) or isinstance(obj, type(sys)):
        raise InputError(spec, f"{attr} is a {type(obj).__name__}, expected a callable: the "
                         f"{what}")
    return obj


def _import_file(spec: str, path: Path) -> Any:
    if not path.is_file():
        raise UnreadableInputError(str(path), f"no such Python file (from {spec!r}); expected "
                                   "path/to/file.py:function")
    name = "trainmedic_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UnreadableInputError(str(path), "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # workers and dataclasses look the module up by name
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)  # the file's own sibling imports
    try:
        module_spec.loader.exec_module(module)
    except TrainmedicError:
        del sys.modules[name]
        raise
    except Exception as exc:
        del sys.modules[name]
        raise InputError(spec, f"running {path} raised {type(exc).__name__}: "
                         f"{_one_line(exc)}") from exc
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def _import_module(spec: str, name: str) -> Any:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # `trainmedic ... mymod:fn` finds mymod.py where it is run
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise InputError(spec, f"no module named {exc.name!r}; run from the folder that "
                             "holds it or give path/to/file.py:function") from None
        raise InputError(spec, f"importing {name} raised ModuleNotFoundError: "
                         f"{_one_line(exc)}") from exc
    except TrainmedicError:
        raise
    except Exception as exc:
        raise InputError(spec, f"importing {name} raised {type(exc).__name__}: "
                         f"{_one_line(exc)}") from exc
