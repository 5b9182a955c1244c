"""Write the memory-snapshot fixtures of tests/memory/test_snapshot.py.

No GPU is needed: each fixture is a plain dict in the structure torch.cuda.memory._snapshot()
documents (torch/cuda/memory.py), pickled as torch.cuda.memory._dump_snapshot does
(``pickle.dump``, default protocol). The sizes are chosen so the expected figures can be
worked out by hand (see the comments), independently of the reader under test.

    python tests/data/memory/make_snapshots.py   # rewrites the *.pickle files next to it
"""

from __future__ import annotations

import pickle
from pathlib import Path

MiB = 2**20
GiB = 2**30
HERE = Path(__file__).resolve().parent


def frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


USER_STACK = [
    frame("/opt/conda/lib/python3.11/site-packages/torch/nn/functional.py", 2905, "linear"),
    frame("/home/user/proj/model.py", 42, "forward"),
    frame("/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", 1527,
          "_call_impl"),
    frame("/home/user/proj/train.py", 88, "train_step"),
    frame("??", 0, "at::native::empty_cuda"),
]


def block(size: int, state: str, address: int, frames: list | None = None,
          requested: int | None = None) -> dict:
    return {"size": size, "requested_size": size if requested is None else requested,
            "address": address, "state": state, "frames": frames or []}


def segment(device: int, address: int, blocks: list[dict], pool: str = "large") -> dict:
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": device, "address": address, "total_size": total, "stream": 0,
            "segment_type": pool, "segment_pool_id": (0, 0), "allocated_size": allocated,
            "active_size": active, "blocks": blocks}


def fragmented() -> dict:
    """Device 0: 1.5 GiB + 2 MiB reserved; 912 MiB + 0.5 MiB live.

    Segment A (1 GiB): live 300, free 200, live 300, free 224 MiB.
    Segment B (512 MiB): free 100, live 312, free 100 MiB.
    Segment C (small pool, 2 MiB): live 0.5, free 1.5 MiB.
    Free large-pool blocks: 200+224+100+100 = 624 MiB, the largest 224 MiB; all are split.
    The trace ends with an oom of 400 MiB while the driver had 150 MiB free:
    624 >= 400 > 224, so fragmentation.
    """
    a, b, c = 0x7F0000000000, 0x7F0040000000, 0x7F0060000000
    seg_a = segment(0, a, [
        block(300 * MiB, "active_allocated", a, USER_STACK, requested=300 * MiB - 512),
        block(200 * MiB, "inactive", a + 300 * MiB),
        block(300 * MiB, "active_allocated", a + 500 * MiB, USER_STACK[1:]),
        block(224 * MiB, "inactive", a + 800 * MiB),
    ])
    seg_b = segment(0, b, [
        block(100 * MiB, "inactive", b),
        block(312 * MiB, "active_allocated", b + 100 * MiB, USER_STACK),
        block(100 * MiB, "inactive", b + 412 * MiB),
    ])
    seg_c = segment(0, c, [
        block(MiB // 2, "active_allocated", c, USER_STACK),
        block(3 * MiB // 2, "inactive", c + MiB // 2),
    ], pool="small")
    trace = [
        {"action": "segment_alloc", "addr": a, "size": GiB, "stream": 0, "frames": USER_STACK},
        {"action": "alloc", "addr": a, "size": 300 * MiB, "stream": 0, "frames": USER_STACK},
        {"action": "free_requested", "addr": a + 300 * MiB, "size": 200 * MiB, "stream": 0,
         "frames": USER_STACK},
        {"action": "free_completed", "addr": a + 300 * MiB, "size": 200 * MiB, "stream": 0,
         "frames": USER_STACK},
        {"action": "oom", "size": 400 * MiB, "device_free": 150 * MiB, "stream": 0,
         "frames": USER_STACK},
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "frames": []},
    ]
    return {"segments": [seg_a, seg_b, seg_c], "device_traces": [trace]}


def full() -> dict:
    """Device 0 full: one 8 GiB segment, 7.5 GiB + 480 MiB live, 32 MiB free.

    The oom asks 3 GiB with 100 MiB free on the device: not fragmentation (32 MiB free in
    the cache), and 3 GiB >= 25% of (8 GiB reserved + 100 MiB free): a huge request.
    Device 1 holds one idle 1 GiB segment and no trace.
    """
    a = 0x7E0000000000
    logits = [frame("/home/user/proj/train.py", 120, "compute_loss"),
              frame("/home/user/proj/train.py", 88, "train_step")]
    seg0 = segment(0, a, [
        block(7 * GiB + GiB // 2, "active_allocated", a, logits),
        block(480 * MiB, "active_allocated", a + 7 * GiB + GiB // 2, USER_STACK),
        block(32 * MiB, "inactive", a + 8 * GiB - 32 * MiB),
    ])
    seg1 = segment(1, 0x7D0000000000, [block(GiB, "inactive", 0x7D0000000000)])
    trace0 = [
        {"action": "alloc", "addr": a, "size": 7 * GiB + GiB // 2, "stream": 0,
         "frames": logits},
        {"action": "oom", "size": 3 * GiB, "device_free": 100 * MiB, "stream": 0,
         "frames": logits},
    ]
    return {"segments": [seg0, seg1], "device_traces": [trace0, []]}


def legacy_no_trace() -> dict:
    """An older snapshot: blocks keep frames and size in ``history``, no device_traces.

    One 64 MiB segment: live 16 MiB (asked 15 MiB), free 48 MiB (one block, split: 75%).
    """
    a = 0x7C0000000000
    live = {"size": 16 * MiB, "state": "active_allocated", "address": a,
            "history": [{"addr": a, "real_size": 15 * MiB, "frames": USER_STACK}]}
    free = {"size": 48 * MiB, "state": "inactive", "address": a + 16 * MiB}
    return {"segments": [{"device": 0, "address": a, "total_size": 64 * MiB, "stream": 0,
                          "segment_type": "large", "allocated_size": 16 * MiB,
                          "active_size": 16 * MiB, "blocks": [live, free]}]}


# A pickle (protocol 0) that would call os.system("touch trainmedic_snapshot_pwned") while
# loading: GLOBAL os.system, MARK, STRING, TUPLE, REDUCE, STOP.
MALICIOUS = b"cos\nsystem\n(S'touch trainmedic_snapshot_pwned'\ntR."


def main() -> None:
    for name, data in (("snapshot_fragmented", fragmented()), ("snapshot_full", full()),
                       ("snapshot_legacy_no_trace", legacy_no_trace())):
        (HERE / f"{name}.pickle").write_bytes(pickle.dumps(data))
    (HERE / "snapshot_malicious.pickle").write_bytes(MALICIOUS)


if __name__ == "__main__":
    main()
