"""torchrun worker for tests/dist/test_hang_torchrun.py: a few healthy steps, then one
injected hang, watched by :class:`HangWatchdog` (not the live watcher).

Usage: ``torchrun --nproc-per-node 2 hang_worker.py CASE RUN_DIR`` with CASE one of
``sleep`` (rank 1 sleeps before a barrier), ``desync`` (rank 1 calls broadcast where rank 0
calls all_reduce), ``loader`` (rank 1's data-loader worker is stuck in ``__getitem__``),
``kill`` (rank 1 is SIGKILLed while rank 0 waits in all_reduce). A short gloo timeout ends
each case by itself. Lines the test looks for carry a ``# TAG:<name>`` comment.
``HANG_BACKEND=nccl`` runs it on one GPU per rank (benchmarks/dist_gpu.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from trainmedic.dist.watchdog import HangWatchdog, HangWatchdogConfig

STEPS = 4
#: gloo's collective timeout: the job ends by itself this long after a rank stops.
GLOO_TIMEOUT_S = 6
#: Long enough to outlast the gloo timeout, short enough that nothing outlives the test.
STUCK_S = 25.0


class _Dataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, stuck: bool) -> None:
        self.stuck = stuck

    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.stuck and i >= STEPS:
            time.sleep(STUCK_S)  # TAG:worker_sleep
        return torch.ones(4)


def _timed(wd: HangWatchdog, step: int, fn: object) -> None:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    time.sleep(0.01)
    wd.step_done(step, time.perf_counter() - t0)


def main(case: str, run_dir: str) -> None:
    torch.set_num_threads(1)
    backend = os.environ.get("HANG_BACKEND", "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timedelta(seconds=GLOO_TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cuda" if backend == "nccl" else "cpu"
    cfg = HangWatchdogConfig(floor_s=2.0, min_steps=2, first_step_limit_s=60.0,
                             heartbeat_interval_s=0.5, poll_interval_s=0.1)
    t = torch.ones(4, device=device)
    with HangWatchdog(cfg, run_dir=run_dir, rank=rank, world_size=world) as wd:
        if case == "loader":
            loader = torch.utils.data.DataLoader(_Dataset(stuck=rank == 1), batch_size=1,
                                                 num_workers=1, timeout=STUCK_S)
            for step, x in enumerate(loader):  # TAG:loader_next
                _timed(wd, step, lambda x=x: dist.all_reduce(x.to(device)))  # TAG:loader_allreduce
            return
        for step in range(STEPS):
            _timed(wd, step, lambda: dist.all_reduce(t))
        if case == "sleep":
            if rank == 1:
                time.sleep(STUCK_S)  # TAG:sleep
            dist.barrier()  # TAG:barrier
        elif case == "desync":
            if rank == 1:
                dist.broadcast(t, src=0)  # TAG:broadcast
            else:
                dist.all_reduce(t)  # TAG:desync_allreduce
        elif case == "kill":
            if rank == 1:
                time.sleep(0.5)  # rank 0 is inside its all_reduce by now
                os.kill(os.getpid(), signal.SIGKILL)  # TAG:kill
            dist.all_reduce(t)  # TAG:kill_allreduce


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # no exit-time destructors: gloo's threads may abort a rank there (tests/live)
        os._exit(0 if sys.exc_info()[0] is None else 1)
