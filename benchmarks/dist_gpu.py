"""``dist check`` and the injected hangs on NCCL, for a machine with GPUs (issue 15).

1. ``torchrun --nproc-per-node <GPUs> -m trainmedic dist check --json`` (NCCL on CUDA): every
   rank's device, the collectives against known values, the allocation.
2. With two or more GPUs, the hang cases of tests/dist/hang_worker.py on NCCL, one launch
   each (a rank sleeping before a barrier, a desync, a rank killed mid-collective), each read
   back with ``trainmedic dist diagnose``: the rank, op, sequence number and line it names.
   NCCL collectives return to the host before they finish, so where the host waits differs
   from gloo: this is what the script is for.

Run from the repository root: ``python benchmarks/dist_gpu.py``. Without a GPU it says so and
exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import one_line  # noqa: E402

RUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
TM = [sys.executable, "-m", "trainmedic"]


def _run(cmd: list[str], env: dict[str, str], timeout_s: int) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s,
                              cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return subprocess.CompletedProcess(cmd, 124, out, f"timed out after {timeout_s} s")


def main() -> int:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(one_line())
    if n == 0:
        print(f"dist_gpu: no CUDA device (torch {torch.__version__}); skipped")
        return 0
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    check = _run([*RUN, "--nproc-per-node", str(n), "-m", "trainmedic", "dist", "check",
                  "--json", "--timeout", "60"], env, 300)
    try:
        doc = json.loads(check.stdout[check.stdout.index("{"):])
        devices = [r.get("device") for r in doc.get("ranks", [])]
        print(f"dist check on {n} GPU(s), exit {check.returncode}: ok={doc.get('ok')}, "
              f"backend {doc.get('backend')}, devices {devices}, missing "
              f"{doc.get('missing_ranks')}")
    except ValueError:
        print(f"dist check on {n} GPU(s), exit {check.returncode}:\n{check.stdout[-3000:]}"
              f"\n{check.stderr[-3000:]}")
    if n < 2:
        print("hang cases: need 2 GPUs (NCCL refuses two ranks on one device); skipped")
        return 0
    worker = ROOT / "tests" / "dist" / "hang_worker.py"
    for case in ("sleep", "desync", "kill"):
        with tempfile.TemporaryDirectory() as run_dir:
            case_env = {**env, "HANG_BACKEND": "nccl", "TORCH_FR_BUFFER_SIZE": "200"}
            job = _run([*RUN, "--nproc-per-node", "2", str(worker), case, run_dir], case_env,
                       180)
            diag = _run([*TM, "dist", "diagnose", run_dir], env, 60)
            print(f"== {case}: job exit {job.returncode}, diagnose exit {diag.returncode}")
            print(diag.stdout[-4000:] or diag.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
