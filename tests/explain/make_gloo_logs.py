"""Produce real crash logs with torchrun and gloo on CPU (run once; the outputs are committed
under tests/data/explain/gloo_*.log, and one case is regenerated live by the tests).

    python tests/explain/make_gloo_logs.py tests/data/explain        # every case
    python tests/explain/make_gloo_logs.py OUT_DIR raise             # one case

Each case launches ``torchrun --standalone --nproc-per-node 2`` on this file; the workers
(``RANK`` set) do a few all_reduces on gloo and then fail as the case says:

- ``raise``: rank 1 raises a ValueError (torchrun's ``--tee 3`` prefixes every line with its
  rank): a Python traceback, then torchrun's ChildFailedError naming rank 1;
- ``sigkill``: rank 1 SIGKILLs itself, as the OOM killer would: exitcode -9;
- ``record``: rank 1 raises inside a ``@record``-decorated main, so torchrun's summary carries
  the traceback from the error file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

CASES = ("raise", "sigkill", "record")
TIMEOUT_S = 120


def _work(case: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(x)
    dist.barrier()
    if rank == 1:
        if case == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"label 7 out of range for 5 classes (rank {rank}, step 3)")
    dist.barrier()  # rank 0 waits here for rank 1, which never comes
    dist.destroy_process_group()


def _worker() -> None:
    case = sys.argv[1]
    if case == "record":
        from torch.distributed.elastic.multiprocessing.errors import record

        record(_work)(case)
    else:
        _work(case)


def launch(case: str, out_dir: Path) -> Path:
    """Run one case; its combined stdout/stderr is written to ``out_dir/gloo_<case>.log``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2"]
    if case == "raise":
        cmd += ["--tee", "3"]
    cmd += [__file__, case]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers
        out, _ = proc.communicate()
        raise RuntimeError(f"torchrun did not finish in {TIMEOUT_S} s:\n{out[-3000:]}") from None
    if proc.returncode == 0:
        raise RuntimeError(f"case {case}: the job was meant to fail but exited 0:\n{out}")
    path = out_dir / f"gloo_{case}.log"
    path.write_text(out)
    return path


if __name__ == "__main__":
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        _worker()
    else:
        target = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/explain")
        for name in (sys.argv[2:] or CASES):
            print(launch(name, target))
