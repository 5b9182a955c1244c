"""The rule registry: one rule per failure class, registered by decorator.

A rule is a pure function ``(LogText) -> list[Incident]``. Registering a class code twice is an
error, as in ``trainmedic.diagnose.registry`` (and ``torch.utils.flop_counter``'s formula
registry).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from trainmedic.errors import RegistryError
from trainmedic.explain.incident import Incident
from trainmedic.explain.log_text import LogText

__all__ = ["Rule", "RuleFn", "CLASSES", "register_rule", "unregister_rule", "rules", "get_rule"]

RuleFn = Callable[[LogText], list[Incident]]

#: Every built-in class code with its one-line meaning (docs/explain.md has an example each).
CLASSES: dict[str, str] = {
    "nccl_timeout": "NCCL's watchdog timed out a collective: some rank did not arrive",
    "nccl_error": "NCCL (or the process group) reported an error or lost a peer",
    "cuda_device_assert": "a CUDA kernel's assertion failed (device-side assert)",
    "cuda_illegal_access": "a CUDA kernel accessed memory it must not (illegal address)",
    "gpu_xid": "the NVIDIA driver logged an Xid / ECC error (hardware or driver event)",
    "cuda_oom": "CUDA ran out of device memory",
    "host_oom_kill": "the process was killed (SIGKILL / exit 137): usually host memory",
    "torchrun_child_failed": "torchrun reports a worker that failed (ChildFailedError)",
    "slurm_timeout": "SLURM cancelled the job at its time limit",
    "slurm_preempted": "SLURM cancelled (preempted) the job for another job",
    "slurm_node_fail": "SLURM cancelled the job because a node failed",
    "python_exception": "a Python exception ended the process (the last traceback)",
}

_USER_CODE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Rule:
    code: str
    fn: RuleFn


_REGISTRY: dict[str, Rule] = {}
USER_CLASSES: dict[str, str] = {}


def register_rule(code: str, *, doc: str | None = None) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the rule for class ``code``: a built-in code (``CLASSES``) or your
    own, namespaced ``<namespace>.<code>`` with ``doc``, its one-line meaning. Raises
    ``RegistryError`` for an unknown built-in-looking code, a user code without ``doc``, or a
    code that already has a rule."""

    def deco(fn: RuleFn) -> RuleFn:
        if code not in CLASSES:
            if not _USER_CODE.match(code):
                raise RegistryError(
                    f"unknown class code {code!r}: your own codes are namespaced, "
                    f"'<namespace>.<code>' in lower case (e.g. 'acme.fs_full'); a built-in "
                    f"code is added to CLASSES and docs/explain.md first")
            if not (doc and doc.strip()):
                raise RegistryError(f"user class code {code!r} needs doc=, its one-line "
                                    f"meaning, e.g. doc='the scratch file system filled up'")
        if code in _REGISTRY:
            old = _REGISTRY[code].fn
            raise RegistryError(f"a rule for {code!r} is already registered "
                                f"({old.__module__}.{old.__qualname__}); unregister it or "
                                f"pick another code")
        _REGISTRY[code] = Rule(code, fn)
        if code not in CLASSES and doc:
            USER_CLASSES[code] = " ".join(doc.split())
        return fn

    return deco


def unregister_rule(code: str) -> None:
    """Remove a registered rule (for tests and for users replacing a built-in)."""
    _REGISTRY.pop(code, None)
    USER_CLASSES.pop(code, None)


def rules() -> list[Rule]:
    """Every registered rule, the built-ins loaded first."""
    import trainmedic.explain.rules_cuda  # noqa: F401  (registers the built-ins)
    import trainmedic.explain.rules_host  # noqa: F401
    import trainmedic.explain.rules_nccl  # noqa: F401
    import trainmedic.explain.rules_python  # noqa: F401

    return list(_REGISTRY.values())


def get_rule(code: str) -> Rule:
    rules()
    try:
        return _REGISTRY[code]
    except KeyError:
        raise RegistryError(f"no rule registered for {code!r}; known: "
                            f"{sorted(_REGISTRY)}") from None
