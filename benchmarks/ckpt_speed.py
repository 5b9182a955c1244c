"""What trustworthy checkpoints cost: trainmedic's CheckpointManager against plain torch.save /
torch.load (and plain DCP) of the same state on the same disk.

Usage (from the repository root)::

    .venv/bin/python benchmarks/ckpt_speed.py                       # ~1.6 GB state, ~2-4 min
    .venv/bin/python benchmarks/ckpt_speed.py --params-mb 128 --repeats 2   # a quick look
    .venv/bin/python benchmarks/ckpt_speed.py --dir /mnt/nvme/tmp --json

The state: a stack of ``Linear(4096, 4096)`` layers holding ``--params-mb`` of fp32 weights
(default 512 MB: 8 layers, 134M parameters) and AdamW after one step (two fp32 moments per
parameter): ~1.6 GB in ``model.pt`` + ``optimizer.pt``.

Rows (each repeated ``--repeats`` times, variants interleaved in one order per round so machine
noise hits all alike; the figure is the median, min-max beside it):

* **save**: ``torch.save`` of the model and optimizer state dicts to two files (what users do;
  not durable: the data may still sit in the page cache), the same plus ``fsync`` of both
  files (durable), ``CheckpointManager.save`` (sync: CRC-32 while writing, fsync, manifest,
  rename, directory fsync), the same with ``sync_files=False`` (everything but the fsyncs:
  the like-for-like comparison with plain ``torch.save``), and plain DCP (``dcp.save`` of
  ``get_state_dict``, one process).
  Throughput = state bytes / wall time. Bar (issue 5): manager >= 0.9x ``torch.save``.
* **load**: ``torch.load(weights_only=True)`` of both files + ``load_state_dict`` into the
  live model and optimizer, against ``CheckpointManager.load(path=...)`` (CRC-32 of both
  files, ``weights_only`` load through mmap, finiteness of every tensor, ``load_state_dict``).
  Twice: with the files in the page cache (just written), and after evicting them with
  ``posix_fadvise(DONTNEED)`` (``/proc/sys/vm/drop_caches`` is not used: it needs root on
  the host and would disturb other work). On a VM the host may still cache the disk image:
  "evicted" reads are then host-memory reads, which the output cannot tell apart.
* **async save**: how long the training is blocked: ``save()`` itself (staging buffers and
  training state) plus the extra wait of the next ``optimizer.step()`` for the deferred copy
  of parameters and moments, after a real forward+backward of ``--batch`` rows; for the first
  save (buffers allocated) and later ones (buffers reused), against the sync save time. Bar:
  <= 10%. Also how much the copy running beside the forward+backward slowed it, and the time
  until the background write has committed.
* **verify hashing**: ``hash_file`` (CRC-32, one thread) over the checkpoint files from the
  page cache, in GB/s; and a full ``verify()`` (hash, load, finiteness). Bar: >= 1 GB/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from machine import describe, one_line  # noqa: E402


def _build(params_mb: int) -> tuple[Any, Any, int]:
    import torch

    width = 4096
    layers = max(1, round(params_mb * 1e6 / 4 / (width * width + width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()  # creates exp_avg / exp_avg_sq
    for p in model.parameters():
        p.grad = None
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for st in opt.state.values():
        nbytes += sum(t.numel() * t.element_size() for t in st.values())
    return model, opt, nbytes


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _evict(paths: list[Path]) -> None:
    """Drop the (clean) pages of these files from the page cache."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall s, CPU s of this process, all threads) of one call."""
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def _summary(times: list[tuple[float, float]], nbytes: int) -> dict[str, float]:
    wall = [w for w, _ in times]
    cpu = [c for _, c in times]
    med = statistics.median(wall)
    return {"median_s": med, "min_s": min(wall), "max_s": max(wall),
            "gb_per_s": nbytes / med / 1e9, "gb_per_s_best": nbytes / min(wall) / 1e9,
            "cpu_median_s": statistics.median(cpu), "cpu_min_s": min(cpu)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from trainmedic.checkpoint import CheckpointManager, verify
    from trainmedic.checkpoint.manifest import hash_file

    torch.set_num_threads(args.threads)
    base = Path(tempfile.mkdtemp(prefix="ckpt_speed_", dir=args.dir))
    model, opt, nbytes = _build(args.params_mb)
    info: dict[str, Any] = {
        "machine": describe(), "torch": torch.__version__,
        "disk_free_gb": round(shutil.disk_usage(base).free / 1e9, 1), "dir": str(base),
        "state_bytes": nbytes, "torch_threads": args.threads, "repeats": args.repeats}
    results: dict[str, Any] = {"info": info}
    try:
        plain_dir = base / "plain"
        files = [plain_dir / "model.pt", plain_dir / "optimizer.pt"]

        def torch_save(durable: bool) -> None:
            plain_dir.mkdir()
            torch.save(model.state_dict(), files[0])
            torch.save(opt.state_dict(), files[1])
            if durable:
                for f in files:
                    _fsync(f)

        # keep_last=None: deleting the previous checkpoint is not part of the timed save
        # (it happens between rounds, as for the other rows).
        mgr = CheckpointManager(base / "ours", keep_last=None)
        fast = CheckpointManager(base / "ours", keep_last=None, sync_files=False)
        step = iter(range(1, 10_000))

        def ours() -> None:
            mgr.save(next(step), {"model": model, "optimizer": opt})

        def ours_no_fsync() -> None:
            fast.save(next(step), {"model": model, "optimizer": opt})

        def plain_dcp() -> None:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict

            msd, osd = get_state_dict(model, opt)
            with warnings.catch_warnings():  # "torch.distributed is ... uninitialized"
                warnings.simplefilter("ignore", UserWarning)
                dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=str(base / "dcp"),
                         no_dist=True)

        save_variants: dict[str, Callable[[], Any]] = {
            "torch.save": lambda: torch_save(False),
            "torch.save+fsync": lambda: torch_save(True),
            "manager.save": ours,
            "manager.save(sync_files=False)": ours_no_fsync,
        }
        if not args.no_dcp:
            save_variants["dcp.save"] = plain_dcp
        save_times: dict[str, list[tuple[float, float]]] = {k: [] for k in save_variants}
        for _ in range(args.repeats + 1):  # the first round warms up (file pages, allocator)
            for name, fn in save_variants.items():
                # Every variant writes new files into an empty folder, with no dirty pages
                # of another variant left to flush (os.sync, untimed).
                for folder in (plain_dir, base / "dcp"):
                    shutil.rmtree(folder, ignore_errors=True)
                for old in list((base / "ours").glob("step-*")):
                    shutil.rmtree(old)
                os.sync()
                save_times[name].append(_timed(fn))
        results["save"] = {k: _summary(v[1:], nbytes) for k, v in save_times.items()}
        shutil.rmtree(base / "dcp", ignore_errors=True)
        torch_save(True)  # the files the load rows read
        ours()

        # ---- load: the files just written (page cache), then evicted
        ours_path = mgr.latest()
        assert ours_path is not None
        ours_files = [ours_path / "model.pt", ours_path / "optimizer.pt"]

        def torch_load() -> None:
            model.load_state_dict(torch.load(files[0], weights_only=True))
            opt.load_state_dict(torch.load(files[1], weights_only=True))

        def ours_load() -> None:
            mgr.load({"model": model, "optimizer": opt}, path=ours_path)

        for cache in ("cached", "evicted"):
            times: dict[str, list[tuple[float, float]]] = {"torch.load": [],
                                                           "manager.load": []}
            for _ in range(args.repeats + (1 if cache == "cached" else 0)):
                for name, fn, fs in (("torch.load", torch_load, files),
                                     ("manager.load", ours_load, ours_files)):
                    if cache == "evicted":
                        _evict(fs)
                    times[name].append(_timed(fn))
            if cache == "cached":
                times = {k: v[1:] for k, v in times.items()}
            results[f"load_{cache}"] = {k: _summary(v, nbytes) for k, v in times.items()}

        # ---- verify hashing speed (one thread, page cache) and a full verify
        for f in ours_files:
            hash_file(f)  # into the cache
        hash_s = [_timed(lambda: [hash_file(f) for f in ours_files])
                  for _ in range(args.repeats)]  # one thread: CPU time ~ wall time
        verify_s = [_timed(lambda: verify(ours_path)) for _ in range(args.repeats)]
        results["verify"] = {"hash": _summary(hash_s, nbytes),
                             "full_verify": _summary(verify_s, nbytes)}
        gc.collect()

        # ---- async: how long the training is blocked, against the sync save. A save happens
        # between two optimizer steps; the training then runs its next forward and backward
        # and calls optimizer.step(), which waits for the deferred copy of the parameters and
        # moments (checkpoint/staging.py). Blocked = save()'s own time + that step's extra
        # wait over a plain step; the forward+backward slowdown from the copy running beside
        # it is reported too.
        x = torch.randn(args.batch, model[0].in_features)

        def fwd_bwd() -> float:
            t = time.perf_counter()
            model(x).square().mean().backward()
            return time.perf_counter() - t

        def opt_step() -> float:
            t = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return time.perf_counter() - t

        plain_fb: list[float] = []
        plain_step: list[float] = []
        for _ in range(3):
            plain_fb.append(fwd_bwd())
            plain_step.append(opt_step())
        base_fb, base_step = statistics.median(plain_fb), statistics.median(plain_step)
        sync = results["save"]["manager.save"]
        results["async"] = {}
        for mode in ("eager", "deferred"):
            amgr = CheckpointManager(base / f"async-{mode}", keep_last=1, async_save=True,
                                     defer_copy=mode == "deferred")
            in_save: list[float] = []
            in_step: list[float] = []
            fb_slow: list[float] = []
            total: list[float] = []
            for i in range(args.repeats + 1):
                os.sync()
                t0 = time.perf_counter()
                amgr.save(i + 1, {"model": model, "optimizer": opt})
                in_save.append(time.perf_counter() - t0)
                fb_slow.append(fwd_bwd() - base_fb)
                in_step.append(max(0.0, opt_step() - base_step))
                amgr.wait()
                total.append(time.perf_counter() - t0)
            amgr.close()
            # Blocked: the training thread cannot go on -- save() itself, and with the
            # deferred copy the next optimizer.step()'s wait for it. The rest of the next
            # step's extra time is contention with the background copy and write.
            waits = in_step if mode == "deferred" else [0.0] * len(in_step)
            blocked = [a + b for a, b in zip(in_save, waits, strict=True)]
            delay = [a + b + max(0.0, c) for a, b, c in zip(in_save, in_step, fb_slow,
                                                            strict=True)]
            steady = statistics.median(blocked[1:])
            results["async"][mode] = {
                "blocked_first_s": blocked[0], "blocked_steady_s": steady,
                "blocked_steady_min_s": min(blocked[1:]),
                "in_save_s": statistics.median(in_save[1:]),
                "in_step_s": statistics.median(in_step[1:]),
                "fwd_bwd_s": base_fb, "fwd_bwd_slowdown_s": statistics.median(fb_slow[1:]),
                "delay_s": statistics.median(delay[1:]),
                "until_committed_s": statistics.median(total[1:]),
                "sync_save_s": sync["median_s"], "sync_save_min_s": sync["min_s"],
                "blocked_fraction": steady / sync["median_s"],
                "blocked_fraction_best": min(blocked[1:]) / sync["min_s"],
                "delay_fraction": statistics.median(delay[1:]) / sync["median_s"]}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def _row(name: str, s: dict[str, float], ref: dict[str, float] | None,
         ref2: dict[str, float] | None = None) -> str:
    line = (f"  {name:<31} {s['median_s']:5.2f} ({s['min_s']:.2f}-{s['max_s']:.2f})  "
            f"cpu {s['cpu_median_s']:5.2f} (min {s['cpu_min_s']:.2f})  "
            f"{s['gb_per_s']:5.2f} GB/s (best {s['gb_per_s_best']:.2f})")
    for r in (ref, ref2):
        if r is not None:
            line += (f"  {r['median_s'] / s['median_s']:.2f}x"
                     f" (best {r['min_s'] / s['min_s']:.2f}x)")
    return line


def _print(r: dict[str, Any]) -> None:
    info = r["info"]
    print(one_line(info["machine"]))
    print(f"torch {info['torch']} ({info['torch_threads']} threads); folder {info['dir']} "
          f"({info['disk_free_gb']} GB free at start); state {info['state_bytes'] / 1e9:.2f} GB"
          f"; wall-time median of {info['repeats']} (min-max), this process's CPU time "
          f"(all threads), throughput = state / median (best = state / min); ratios = "
          f"throughput relative to the reference row, from medians (and from minima)")
    save = r["save"]
    print("\nsave (new files, os.sync() before each)                            "
          "vs torch.save   vs torch.save+fsync")
    for name, s in save.items():
        print(_row(name, s, save["torch.save"], save["torch.save+fsync"]))
    for cache in ("cached", "evicted"):
        rows = r[f"load_{cache}"]
        label = ("from the page cache" if cache == "cached" else
                 "after posix_fadvise(DONTNEED); a VM host may still cache")
        print(f"\nload into the live model and optimizer ({label})          vs torch.load")
        for name, s in rows.items():
            print(_row(name, s, rows["torch.load"]))
    v = r["verify"]
    print(f"\nverify: CRC-32 hashing {v['hash']['gb_per_s']:.2f} GB/s, hashed on one thread "
          f"while another reads (best "
          f"{v['hash']['gb_per_s_best']:.2f}; page cache); full verify (hash + weights_only "
          f"load + finiteness) {v['full_verify']['median_s']:.2f} s = "
          f"{v['full_verify']['gb_per_s']:.2f} GB/s")
    for mode, a in r["async"].items():
        what = "waiting for the copy" if mode == "deferred" else "contention"
        print(f"async save ({mode} copy): training blocked {a['blocked_steady_s']:.3f} s (min "
              f"{a['blocked_steady_min_s']:.3f}; the first save {a['blocked_first_s']:.3f} s) = "
              f"{100 * a['blocked_fraction']:.1f}% of the sync save's median "
              f"{a['sync_save_s']:.2f} s ({100 * a['blocked_fraction_best']:.1f}% min to min). "
              f"save() took {a['in_save_s']:.3f} s; the next forward+backward "
              f"{a['fwd_bwd_slowdown_s']:+.3f} s (vs {a['fwd_bwd_s']:.3f} s alone; contention) "
              f"and optimizer.step() +{a['in_step_s']:.3f} s ({what}): the step was delayed "
              f"{a['delay_s']:.3f} s in all ({100 * a['delay_fraction']:.1f}%); committed after "
              f"{a['until_committed_s']:.2f} s")
    print(f"load average at the end: {describe()['load_average']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None,
                    help="Where to write (default: the system temp folder). Needs ~4x the "
                         "state size free.")
    ap.add_argument("--params-mb", type=int, default=512,
                    help="fp32 weights in MB (AdamW adds 2x): default 512 -> ~1.6 GB state")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                    help="torch intra-op threads")
    ap.add_argument("--no-dcp", action="store_true", help="Skip the plain DCP row.")
    ap.add_argument("--batch", type=int, default=16,
                    help="Rows of the forward+backward run after an async save (default 16).")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    target = Path(args.dir or tempfile.gettempdir())
    free = shutil.disk_usage(target).free
    need = int(args.params_mb * 1e6 * 3 * 4.5)
    if free < need:
        sys.exit(f"ckpt_speed: {target} has {free / 1e9:.1f} GB free; this run needs about "
                 f"{need / 1e9:.1f} GB (lower --params-mb or pass --dir)")
    r = run(args)
    if args.json:
        print(json.dumps(r, indent=1, default=str))
    else:
        _print(r)


if __name__ == "__main__":
    main()
