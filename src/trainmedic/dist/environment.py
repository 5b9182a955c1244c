"""The launch and the environment a distributed job starts in, read and judged.

Pure functions over a mapping of environment variables and a :class:`HostFacts` (what this host
offers: /dev/shm size, the locked-memory limit, network interfaces), so a test can feed a tiny
/dev/shm or an interface list; :func:`read_host_facts` is the one place that reads the host.

What is judged, and why (each an :class:`EnvFinding`, ``error`` fails ``dist check``):

- ``NCCL_*`` variables are listed; a name NCCL does not document is flagged (NCCL ignores unknown
  names silently, so ``NCCL_SOCKET_IFNAM=eth0`` does nothing); a close match names the likely
  intended variable. Source of the names: NCCL's "Environment Variables" page,
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html (2.2x), plus the old
  torch-side names (``NCCL_ASYNC_ERROR_HANDLING``, ``NCCL_BLOCKING_WAIT``, ``NCCL_DESYNC_DEBUG``)
  that torch now reads as ``TORCH_NCCL_*``.
- ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` naming no interface of this host (NCCL: a
  comma list of prefixes, ``^`` excludes, ``=`` matches exactly, per the page above; gloo: exact
  names) fails bring-up ("no socket interface found" / "Cannot assign requested address").
- ``NCCL_P2P_DISABLE`` / ``NCCL_IB_DISABLE`` / ``NCCL_SHM_DISABLE`` set: a slower transport.
- /dev/shm under 1 GiB (Docker's default is 64 MiB): NCCL's shared-memory transport and
  DataLoader workers fail with bus errors; fix with ``--shm-size`` or ``--ipc=host``.
- the locked-memory limit (``ulimit -l``) not unlimited: InfiniBand verbs pin (register) memory,
  and NCCL's IB transport fails to register buffers under a small limit.
- two local ranks on one host using one GPU (``CUDA_VISIBLE_DEVICES`` or ``LOCAL_RANK`` mixed
  up): NCCL refuses with "Duplicate GPU detected".

Besides :func:`read_host_facts`, the only I/O here is the rendezvous: :func:`open_rendezvous`
connects to the job's TCPStore (torchrun's agent store, or rank 0's under srun) and
:func:`init_group` opens the process group on it, bounded by a timeout; ``dist check`` and
``bench collectives`` share them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import resource
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["Launch", "launch_from_env", "first_slurm_host", "HostFacts", "read_host_facts",
           "EnvFinding", "check_environment", "interfaces_matching", "DeviceClaim",
           "shared_devices", "KNOWN_NCCL_VARIABLES", "SHM_MIN_BYTES", "resolve_backend",
           "Rendezvous", "open_rendezvous", "init_group"]

_POLL_S = 0.05
#: Below this /dev/shm is too small for NCCL's SHM transport with several local ranks.
SHM_MIN_BYTES = 2**30

#: NCCL's documented variables (env.html, system configuration and debugging sections).
KNOWN_NCCL_VARIABLES = frozenset("""
NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC
NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_SOCKET_INLINE NCCL_SOCKET_MIN_TASKSIZE
NCCL_CROSS_NIC NCCL_IB_HCA NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_GID_INDEX
NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_TC
NCCL_IB_FIFO_TC NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_DISABLE NCCL_IB_AR_THRESHOLD
NCCL_IB_QPS_PER_CONNECTION NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_CUDA_SUPPORT
NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_ECE_ENABLE NCCL_IB_MERGE_VFS
NCCL_IB_MERGE_NICS NCCL_IB_USE_INLINE NCCL_IB_PKEY NCCL_IB_DATA_DIRECT NCCL_IB_GDR_FLUSH_DISABLE
NCCL_IB_WARN_RAIL_LOCAL NCCL_IB_MQP_RETRY_ALL NCCL_IB_MQP_RETRY_CNT NCCL_IB_MQP_RETRY_SLEEP_MSEC
NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD NCCL_UID_STAGGER_RATE
NCCL_NET NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN NCCL_ENV_PLUGIN
NCCL_IGNORE_CPU_AFFINITY NCCL_CONF_FILE NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS
NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_DEBUG_TIMESTAMP_LEVELS NCCL_COLLNET_ENABLE
NCCL_COLLNET_NODE_THRESHOLD NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_SET_THREAD_NAME
NCCL_SET_STACK_SIZE NCCL_GRAPH_FILE NCCL_GRAPH_DUMP_FILE NCCL_GRAPH_MIXING_SUPPORT
NCCL_MEM_SYNC_DOMAIN NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_SINGLE_RING_THRESHOLD
NCCL_LL_THRESHOLD NCCL_TREE_THRESHOLD NCCL_ALGO NCCL_PROTO NCCL_NVB_DISABLE NCCL_PXN_DISABLE
NCCL_P2P_PXN_LEVEL NCCL_RUNTIME_CONNECT NCCL_GRAPH_REGISTER NCCL_LOCAL_REGISTER
NCCL_LEGACY_CUDA_REGISTER NCCL_WIN_ENABLE NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE
NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS NCCL_MAX_CTAS NCCL_MIN_CTAS NCCL_CGA_CLUSTER_SIZE
NCCL_CHECKS_DISABLE NCCL_CHECK_POINTERS NCCL_LAUNCH_MODE NCCL_LAUNCH_ORDER_IMPLICIT
NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MAX_NRINGS NCCL_MIN_NRINGS NCCL_P2P_NET_CHUNKSIZE
NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE NCCL_P2P_LL_THRESHOLD NCCL_P2P_READ_ENABLE
NCCL_P2P_USE_CUDA_MEMCPY NCCL_SHM_USE_CUDA_MEMCPY NCCL_SHM_MEMCPY_MODE NCCL_SHM_DISABLE
NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_GDR_C2C
NCCL_NET_DISABLE_INTRA NCCL_NET_FORCE_FLUSH NCCL_NET_OVERHEAD NCCL_NET_MERGE_LEVEL
NCCL_DMABUF_ENABLE NCCL_GDRCOPY_ENABLE NCCL_GDRCOPY_FIFO_ENABLE NCCL_GDRCOPY_SYNC_ENABLE
NCCL_GDRCOPY_FLUSH_ENABLE NCCL_NVLS_ENABLE NCCL_NVLS_CHUNKSIZE NCCL_NVLS_NCHANNELS
NCCL_NVLSTREE_MAX_CHUNKSIZE NCCL_MNNVL_ENABLE NCCL_MNNVL_UUID NCCL_MNNVL_CLIQUE_ID
NCCL_RAS_ENABLE NCCL_RAS_ADDR NCCL_RAS_TIMEOUT_FACTOR NCCL_CTA_POLICY NCCL_NETDEVS_POLICY
NCCL_COMM_BLOCKING NCCL_WORK_FIFO_DEPTH NCCL_WORK_FIFO_BYTES NCCL_WORK_ARGS_BYTES
NCCL_NCHANNELS_PER_NET_PEER NCCL_ALLOC_P2P_NET_LL_BUFFERS NCCL_PROXY_APPEND_BATCH_SIZE
NCCL_PROXY_DUMP_SIGNAL NCCL_CREATE_THREAD_CONTEXT NCCL_PROGRESS_APPENDOP_FREQ
NCCL_NET_OPTIONAL_RECV_COMPLETION NCCL_PAT_ENABLE NCCL_HOSTID NCCL_COMM_ID
NCCL_COMM_SPLIT_SHARE_RESOURCES NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE NCCL_LAUNCH_RACE_FATAL
""".split())

#: Old torch-side names: torch reads these as TORCH_NCCL_* now (the old ones are deprecated).
TORCH_RENAMED = {"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                 "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
                 "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
                 "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING"}

#: Transport switches whose "1" trades bandwidth for a work-around.
_SLOWER_WHEN_SET = {
    "NCCL_P2P_DISABLE": "GPU-to-GPU traffic goes through host memory instead of NVLink/PCIe "
                        "peer access",
    "NCCL_IB_DISABLE": "inter-node traffic falls back to TCP sockets instead of "
                       "InfiniBand/RoCE",
    "NCCL_SHM_DISABLE": "intra-node traffic without P2P goes through the network stack",
}
_NCCL_DEBUG_LEVELS = {"VERSION", "WARN", "INFO", "TRACE", "ABORT"}


@dataclass(kw_only=True, frozen=True)
class Launch:
    """Who launched this process and where the rendezvous is."""

    launcher: str
    """``torchrun`` (RANK/WORLD_SIZE set), ``slurm`` (SLURM_PROCID/SLURM_NTASKS) or ``none``."""
    rank: int
    """Global rank."""
    world_size: int
    """Number of ranks."""
    local_rank: int
    """Rank on this host."""
    local_world_size: int | None
    """Ranks on this host, when the launcher says (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE)."""
    master_addr: str | None
    """Rendezvous host (MASTER_ADDR; under SLURM the first host of SLURM_JOB_NODELIST)."""
    master_port: int | None
    """Rendezvous port (MASTER_PORT)."""
    agent_store: bool
    """torchrun's agent already serves the TCPStore at MASTER_ADDR:MASTER_PORT."""
    run_id: str
    """A job id shared by every rank (TORCHELASTIC_RUN_ID, SLURM_JOB_ID), for store keys."""
    restart: int
    """torchrun's restart count (keys of an earlier attempt are not read again)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"world size got {self.world_size}; expected >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank got {self.rank} with world size {self.world_size}; "
                              f"expected 0 <= rank < world size (check RANK / SLURM_PROCID)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} got {raw!r}; expected an integer (set by torchrun/srun; "
                          f"unset it or fix the launcher)") from None


def first_slurm_host(nodelist: str) -> str | None:
    """The first host of a SLURM node list: ``node[03-05,9],gpu1`` -> ``node03``."""
    m = re.match(r"\s*([^,\[\s]+)(?:\[([^\]]+)\])?", nodelist or "")
    if not m:
        return None
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def launch_from_env(env: Mapping[str, str]) -> Launch:
    """Read the launch from torchrun's variables, else SLURM's, else a launch of one process.

    torchrun's win when both are set (torchrun started inside an srun step). Under SLURM
    without MASTER_ADDR, the first host of SLURM_JOB_NODELIST is the rendezvous host.
    """
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        return Launch(
            launcher="torchrun", rank=_int(env, "RANK") or 0,
            world_size=_int(env, "WORLD_SIZE") or 1, local_rank=_int(env, "LOCAL_RANK", 0) or 0,
            local_world_size=_int(env, "LOCAL_WORLD_SIZE"),
            master_addr=env.get("MASTER_ADDR") or None, master_port=_int(env, "MASTER_PORT"),
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            run_id=env.get("TORCHELASTIC_RUN_ID", "") or env.get("MASTER_PORT", ""),
            restart=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) or 0)
    if env.get("SLURM_PROCID") is not None and env.get("SLURM_NTASKS") is not None:
        per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
        return Launch(
            launcher="slurm", rank=_int(env, "SLURM_PROCID") or 0,
            world_size=_int(env, "SLURM_NTASKS") or 1,
            local_rank=_int(env, "SLURM_LOCALID", 0) or 0,
            local_world_size=int(per_node) if per_node.isdigit() else None,
            master_addr=env.get("MASTER_ADDR") or first_slurm_host(
                env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", ""))),
            master_port=_int(env, "MASTER_PORT"), agent_store=False,
            run_id=f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}", restart=0)
    return Launch(launcher="none", rank=0, world_size=1, local_rank=0, local_world_size=1,
                  master_addr=None, master_port=None, agent_store=False, run_id="", restart=0)


@dataclass(kw_only=True, frozen=True)
class HostFacts:
    """What this host offers a distributed job, read once by :func:`read_host_facts`."""

    hostname: str
    """``socket.gethostname()``."""
    shm_total_bytes: int | None
    """Size of /dev/shm (statvfs); None where there is none."""
    memlock_soft_bytes: int | None
    """Soft RLIMIT_MEMLOCK in bytes (``ulimit -l``); None means unlimited."""
    interfaces: tuple[str, ...]
    """Network interfaces (/sys/class/net); empty where unreadable."""
    in_container: bool
    """Docker / Podman / Kubernetes markers found (/.dockerenv, /run/.containerenv, cgroup)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _in_container(root: Path) -> bool:
    if (root / ".dockerenv").exists() or (root / "run/.containerenv").exists():
        return True
    try:
        cgroup = (root / "proc/1/cgroup").read_text()
    except OSError:
        return False
    return any(w in cgroup for w in ("docker", "kubepods", "containerd", "libpod"))


def read_host_facts(*, shm_path: str = "/dev/shm", net_path: str = "/sys/class/net",
                    root: str = "/") -> HostFacts:
    """Read /dev/shm's size, the locked-memory limit and the interfaces of this host."""
    try:
        st = os.statvfs(shm_path)
        shm: int | None = st.f_blocks * st.f_frsize
    except OSError:
        shm = None
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        interfaces = tuple(sorted(os.listdir(net_path)))
    except OSError:
        interfaces = ()
    return HostFacts(hostname=socket.gethostname(), shm_total_bytes=shm,
                     memlock_soft_bytes=None if soft == resource.RLIM_INFINITY else int(soft),
                     interfaces=interfaces, in_container=_in_container(Path(root)))


@dataclass(kw_only=True, frozen=True)
class EnvFinding:
    """One judgement of the environment; ``error`` fails the check."""

    severity: str
    """``info``, ``warning`` or ``error``."""
    code: str
    """Stable short name (``nccl_unknown_variable``, ``socket_ifname_no_match``, ...)."""
    message: str
    """What was found, in one line."""
    fix: str
    """The smallest thing to do about it."""
    variable: str | None = None
    """The environment variable it is about, when one."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def interfaces_matching(spec: str, interfaces: Sequence[str], *, exact: bool = False
                        ) -> list[str]:
    """Interfaces NCCL would use for ``NCCL_SOCKET_IFNAME=spec`` (``exact``: gloo's rule)."""
    spec = spec.strip()
    exclude = spec.startswith("^") and not exact
    spec = spec[1:] if exclude else spec
    exact_all = spec.startswith("=") and not exact
    spec = spec[1:] if exact_all else spec
    items = [s.strip() for s in spec.split(",") if s.strip()]

    def hit(name: str) -> bool:
        return any(name == p if (exact or exact_all) else name.startswith(p) for p in items)

    if exclude:
        return [i for i in interfaces if not hit(i)]
    return [i for i in interfaces if hit(i)]


def _unknown_nccl(name: str) -> EnvFinding:
    close = difflib.get_close_matches(name, sorted(KNOWN_NCCL_VARIABLES), n=1, cutoff=0.85)
    if close:
        return EnvFinding(severity="warning", code="nccl_unknown_variable", variable=name,
                          message=f"{name} is not an NCCL variable: NCCL ignores it (did you "
                                  f"mean {close[0]}?)",
                          fix=f"rename it to {close[0]}")
    return EnvFinding(severity="info", code="nccl_unknown_variable", variable=name,
                      message=f"{name} is not in NCCL's documented variables (a plugin's or a "
                              f"newer NCCL's, or a typo: NCCL ignores names it does not know)",
                      fix="check the name against your NCCL version's env.html")


def _ifname(env: Mapping[str, str], var: str, facts: HostFacts, backend: str
            ) -> list[EnvFinding]:
    spec = env.get(var)
    if spec is None or not facts.interfaces:
        return []
    gloo = var.startswith("GLOO")
    used = interfaces_matching(spec, facts.interfaces, exact=gloo)
    if used:
        return [EnvFinding(severity="info", code="socket_ifname", variable=var,
                           message=f"{var}={spec} selects {', '.join(used)} on {facts.hostname}",
                           fix="none needed")]
    who = "gloo" if gloo else "NCCL"
    note = "" if (gloo or backend == "nccl") else " (this check runs gloo, a NCCL job would fail)"
    return [EnvFinding(severity="error", code="socket_ifname_no_match", variable=var,
                       message=f"{var}={spec} matches no interface of {facts.hostname} (has "
                               f"{', '.join(facts.interfaces)}): {who} cannot open its "
                               f"sockets{note}",
                       fix=f"set {var} to one of {', '.join(facts.interfaces)} or unset it")]


def check_environment(env: Mapping[str, str], facts: HostFacts, *, backend: str,
                      local_world_size: int | None = None) -> list[EnvFinding]:
    """Judge the variables and the host for a job on ``backend`` (``gloo`` / ``nccl``)."""
    out: list[EnvFinding] = []
    nccl = sorted(k for k in env if k.startswith("NCCL_"))
    if nccl:
        shown = ", ".join(f"{k}={env[k]}" for k in nccl)
        out.append(EnvFinding(severity="info", code="nccl_variables",
                              message=f"NCCL variables set: {shown}", fix="none needed"))
    for name in nccl:
        if name in TORCH_RENAMED:
            out.append(EnvFinding(severity="warning", code="nccl_renamed_by_torch", variable=name,
                                  message=f"{name} is read by torch as {TORCH_RENAMED[name]} "
                                          f"now; the old name is deprecated",
                                  fix=f"set {TORCH_RENAMED[name]} instead"))
        elif name not in KNOWN_NCCL_VARIABLES:
            out.append(_unknown_nccl(name))
    for name, what in _SLOWER_WHEN_SET.items():
        if env.get(name, "0").strip() not in ("", "0"):
            out.append(EnvFinding(severity="warning", code="nccl_transport_disabled",
                                  variable=name,
                                  message=f"{name}={env[name]}: {what}; bandwidth will drop",
                                  fix=f"unset {name} unless it works around a known fault"))
    debug = env.get("NCCL_DEBUG")
    if debug is not None and debug.upper() not in _NCCL_DEBUG_LEVELS:
        out.append(EnvFinding(severity="warning", code="nccl_debug_value", variable="NCCL_DEBUG",
                              message=f"NCCL_DEBUG={debug} is not a level NCCL knows",
                              fix="use one of VERSION, WARN, INFO, TRACE"))
    elif debug is None and backend == "nccl":
        out.append(EnvFinding(severity="info", code="nccl_debug_unset",
                              message="NCCL_DEBUG is unset: an NCCL failure will say little",
                              fix="rerun with NCCL_DEBUG=INFO (WARN in production) to see the "
                                  "transports NCCL picks and why it fails"))
    out += _ifname(env, "NCCL_SOCKET_IFNAME", facts, backend)
    out += _ifname(env, "GLOO_SOCKET_IFNAME", facts, backend)
    out += _host_limits(facts, backend, local_world_size)
    return out


def _host_limits(facts: HostFacts, backend: str, local_world_size: int | None
                 ) -> list[EnvFinding]:
    out: list[EnvFinding] = []
    shm = facts.shm_total_bytes
    if shm is not None and shm < SHM_MIN_BYTES:
        where = "in a container" if facts.in_container else "on this host"
        out.append(EnvFinding(
            severity="warning" if facts.in_container or (local_world_size or 1) > 1 else "info",
            code="shm_small",
            message=f"/dev/shm is {shm / 2**20:.0f} MiB {where} (< 1 GiB): NCCL's shared-memory "
                    f"transport and DataLoader workers can fail with a bus error",
            fix="docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with "
                "medium: Memory on /dev/shm"))
    if facts.memlock_soft_bytes is not None:
        out.append(EnvFinding(
            severity="warning" if backend == "nccl" else "info", code="memlock_limited",
            message=f"locked-memory limit (ulimit -l) is {facts.memlock_soft_bytes // 1024} KiB,"
                    f" not unlimited: InfiniBand/RoCE cannot register NCCL's buffers",
            fix="ulimit -l unlimited (docker: --ulimit memlock=-1; SLURM: PropagateResourceLimits"
                " or the node's limits.conf)"))
    return out


@dataclass(kw_only=True, frozen=True)
class DeviceClaim:
    """The device one rank uses, as reported to rank 0."""

    rank: int
    """Global rank."""
    host: str
    """Host name."""
    local_rank: int
    """Rank on the host."""
    device_id: str | None
    """A physical identity (CUDA UUID); None on CPU, where there is nothing to share."""
    visible_devices: str | None
    """That rank's CUDA_VISIBLE_DEVICES."""


def shared_devices(claims: Sequence[DeviceClaim]) -> list[EnvFinding]:
    """Two or more ranks on one host using one physical device: an error each."""
    seen: dict[tuple[str, str], list[DeviceClaim]] = {}
    for c in claims:
        if c.device_id:
            seen.setdefault((c.host, c.device_id), []).append(c)
    out = []
    for (host, device), group in sorted(seen.items()):
        if len(group) < 2:
            continue
        who = ", ".join(f"rank {c.rank} (local {c.local_rank}, CUDA_VISIBLE_DEVICES="
                        f"{c.visible_devices if c.visible_devices is not None else 'unset'})"
                        for c in sorted(group, key=lambda c: c.rank))
        out.append(EnvFinding(severity="error", code="shared_device",
                              message=f"{who} all use device {device} on {host}: NCCL fails "
                                      f"with 'Duplicate GPU detected'",
                              fix="give each local rank its own GPU: do not set "
                                  "CUDA_VISIBLE_DEVICES per rank to one GPU, use "
                                  "torch.cuda.set_device(LOCAL_RANK)"))
    return out


# -- the rendezvous: the store every rank can reach, and the process group on it ------------

def resolve_backend(backend: str) -> str:
    """``auto`` -> nccl when torch sees CUDA, else gloo."""
    import torch

    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("backend got 'nccl' but torch sees no CUDA device; use --backend gloo")
    return backend


class Rendezvous:
    """Keys under one prefix of the job's TCPStore, for arrival, stages and results."""

    def __init__(self, store: Any, launch: Launch, prefix: str, timeout_s: float) -> None:
        self.store, self.launch, self.prefix, self.timeout_s = store, launch, prefix, timeout_s

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def post(self, name: str, value: Any) -> None:
        self.store.set(self.key(name), json.dumps(value))

    def stage(self, rank: int, stage: str) -> None:
        self.post(f"stage/{rank}", stage)

    def read(self, name: str, store: Any | None = None) -> Any:
        s = store or self.store
        if not s.check([self.key(name)]):
            return None
        return json.loads(s.get(self.key(name)).decode())

    def wait(self, names: Iterable[str], deadline: float) -> list[str]:
        """Poll until every key is set or the deadline passes; the names still missing."""
        pending = list(names)
        while pending:
            pending = [n for n in pending if not self.store.check([self.key(n)])]
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)  # short sleeps: a signal to this thread is never held long
        return pending

    def second_client(self) -> Any:
        """Another connection to the store, for a thread while the main one is blocked (a
        TCPStore client serialises its calls)."""
        import torch.distributed as dist

        if self.launch.launcher == "none":
            return self.store
        return dist.TCPStore(self.launch.master_addr or "", self.launch.master_port or 0,
                             is_master=False, timeout=timedelta(seconds=2),
                             wait_for_workers=False)


def open_rendezvous(launch: Launch, kind: str, timeout_s: float) -> Rendezvous:
    """Connect to the job's store (torchrun's agent store, or rank 0's under srun); a store in
    this process for a launch of one. Raises ``ConnectionError``/``RuntimeError`` (torch's) when
    MASTER_ADDR:MASTER_PORT cannot be reached within ``timeout_s``."""
    import torch.distributed as dist

    if launch.launcher == "none":
        store: Any = dist.HashStore()
    else:
        if not launch.master_addr or not launch.master_port:
            raise ConfigError(f"{launch.launcher} launch without MASTER_ADDR/MASTER_PORT; "
                              f"expected both: export MASTER_ADDR=<first host> MASTER_PORT=29500")
        socket.getaddrinfo(launch.master_addr, launch.master_port)  # a bad name fails here, now
        master = launch.rank == 0 and not launch.agent_store
        store = dist.TCPStore(launch.master_addr, launch.master_port, is_master=master,
                              timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    base = f"trainmedic/{kind}/{launch.run_id}/{launch.restart}/"
    # every rank calls the same number of times, so each call of each rank gets the same id
    call = store.add(f"{base}calls/{launch.rank}", 1)
    return Rendezvous(store, launch, f"{base}{call}/", timeout_s)


def init_group(rv: Rendezvous, backend: str, timeout_s: float) -> None:
    """``init_process_group`` on the rendezvous store, bounded by ``timeout_s``."""
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rv.launch.local_rank)
    dist.init_process_group(backend=backend, store=dist.PrefixStore(rv.key("pg/"), rv.store),
                            rank=rv.launch.rank, world_size=rv.launch.world_size,
                            timeout=timedelta(seconds=timeout_s))
