"""A torchrun script that knows nothing of trainmedic (tests/dist/test_hang_torchrun.py runs
it under ``trainmedic dist watch``): two all_reduces, then rank 1 sleeps while rank 0 waits
in the third. Lines the test looks for carry a ``# TAG:<name>`` comment."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
t = torch.ones(4)
for _ in range(2):
    dist.all_reduce(t)
print(f"rank {dist.get_rank()}: two steps done", flush=True)
if dist.get_rank() == 1:
    time.sleep(20)  # TAG:plain_sleep
try:
    dist.all_reduce(t)  # TAG:plain_allreduce
finally:
    sys.stdout.flush()
    os._exit(1)
