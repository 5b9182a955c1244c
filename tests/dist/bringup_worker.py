"""torchrun worker for tests/dist/test_bringup.py: runs ``dist check`` cases on each rank and
writes what the reporting rank emitted to ``BASE/<case>.json`` (and ``.txt``).

Usage (under torchrun): ``bringup_worker.py BASE CASE[,CASE...]``. Cases:

- ``healthy_cli``: the click command, ``--json``, stdout captured to the file;
- ``bad_env``: the library with NCCL_SOCKET_IFNAME naming an absent interface and a typo'd
  NCCL_SOCKET_IFNAM in the environment it judges;
- ``kill``: rank 1 is SIGKILLed as it calls monitored_barrier (the barrier is wrapped here,
  nothing test-only ships in the library);
- ``late``: the last rank starts the check only after the others' timeout (never arrives).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import signal
import sys
import time

TIMEOUT_S = 4.0


def _writer(base: pathlib.Path, case: str):  # type: ignore[no-untyped-def]
    from trainmedic.report.dist_text import check_lines

    def emit(result) -> None:  # type: ignore[no-untyped-def]
        name = f"{case}.rank{result.reporter}"
        (base / f"{name}.txt").write_text("\n".join(check_lines(result, verbose=True)))
        (base / f"{name}.json").write_text(json.dumps(result.to_dict()))
    return emit


def main() -> None:
    base, cases = pathlib.Path(sys.argv[1]), sys.argv[2].split(",")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    from trainmedic.dist.bringup import CheckConfig, run_check

    small = 2**20
    code = 0
    for case in cases:
        if case == "healthy_cli":
            from trainmedic.cli.dist import dist

            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    dist.main(["check", "--json", "--timeout", "30", "--alloc", "1MiB"],
                              standalone_mode=False)
                except SystemExit:
                    pass
            if rank == 0:
                (base / "healthy_cli.rank0.json").write_text(out.getvalue())
        elif case == "bad_env":
            env = {**os.environ, "NCCL_SOCKET_IFNAME": "nonexistent0",
                   "NCCL_SOCKET_IFNAM": "eth0"}
            code |= run_check(CheckConfig(timeout_s=30, alloc_bytes=small, env=env),
                              _writer(base, case)).exit_code
        elif case == "kill":
            import torch.distributed as dist_mod

            if rank == 1:
                def die(*args: object, **kwargs: object) -> None:
                    os.kill(os.getpid(), signal.SIGKILL)
                dist_mod.monitored_barrier = die  # type: ignore[assignment]
            code |= run_check(CheckConfig(timeout_s=30, alloc_bytes=small),
                              _writer(base, case)).exit_code
        elif case == "late":
            if rank == world - 1:
                time.sleep(TIMEOUT_S + 20)  # stopped by torchrun once rank 0 gives up
            code |= run_check(CheckConfig(timeout_s=TIMEOUT_S, alloc_bytes=small),
                              _writer(base, case)).exit_code
    sys.exit(code)


if __name__ == "__main__":
    main()
