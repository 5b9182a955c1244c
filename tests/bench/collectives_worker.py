"""torchrun worker for tests/bench/test_collectives.py: ``collectives_worker.py BASE``.

Two sweeps in one launch: ``healthy`` through the click command (``--json``, rank 0's stdout
captured to ``BASE/healthy.json``), then ``slow`` through the library with rank 1 sleeping
``SLOW_S`` before each timed call (outside the timing, as a rank busy between collectives),
rank 0's result to ``BASE/slow.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import sys
import time

SIZES = "1KiB,16KiB,256KiB"
SLOW_S = 0.03


def main() -> None:
    base = pathlib.Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    from trainmedic.bench.collectives import CollectivesConfig, parse_sizes, run_collectives
    from trainmedic.cli.bench_collectives import collectives

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            collectives.main(["--json", "--sizes", SIZES, "--iters", "5", "--warmup", "1"],
                             standalone_mode=False)
        except SystemExit:
            pass
    if rank == 0:
        (base / "healthy.json").write_text(out.getvalue())

    def late(op: str, i: int) -> None:
        time.sleep(SLOW_S)

    result = run_collectives(CollectivesConfig(sizes_bytes=parse_sizes(SIZES), iters=5,
                                               warmup=1), late if rank == 1 else None)
    if result is not None:
        (base / "slow.json").write_text(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
