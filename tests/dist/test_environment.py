"""``trainmedic.dist.environment``: the launch read from the variables, and the environment
judged, as pure functions over a dict and a :class:`HostFacts` (a tiny /dev/shm, missing
interfaces, a limited memlock are fed, not faked on the host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.dist.environment import (
    DeviceClaim,
    HostFacts,
    check_environment,
    first_slurm_host,
    interfaces_matching,
    launch_from_env,
    read_host_facts,
    shared_devices,
)
from trainmedic.errors import ConfigError

IFACES = ("docker0", "eth0", "eth1", "ib0", "lo")


def _facts(**kw: object) -> HostFacts:
    base: dict[str, object] = dict(hostname="node1", shm_total_bytes=64 * 2**30,
                                   memlock_soft_bytes=None, interfaces=IFACES,
                                   in_container=False)
    base.update(kw)
    return HostFacts(**base)  # type: ignore[arg-type]


def _codes(findings: list) -> dict[str, list[str]]:  # type: ignore[type-arg]
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f.severity)
    return out


# -- the launch -----------------------------------------------------------------------------

def test_torchrun_variables_win_over_slurm() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "MASTER_ADDR": "n0", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RUN_ID": "abc", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    launch = launch_from_env(env)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == (
        "torchrun", 3, 8, 1)
    assert launch.agent_store and launch.master_port == 29500 and launch.run_id == "abc"


def test_slurm_launch_takes_the_first_host_of_the_node_list() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5",
           "SLURM_NTASKS_PER_NODE": "8(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "MASTER_PORT": "6000", "SLURM_JOB_ID": "42"}
    launch = launch_from_env(env)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank,
            launch.local_world_size) == ("slurm", 5, 16, 5, 8)
    assert launch.master_addr == "gpu07" and not launch.agent_store


@pytest.mark.parametrize("nodelist,first", [("node[03-05,9],gpu1", "node03"), ("a1,a2", "a1"),
                                            ("solo", "solo"), ("x[1,4]", "x1")])
def test_first_slurm_host(nodelist: str, first: str) -> None:
    assert first_slurm_host(nodelist) == first


def test_no_launcher_is_one_rank_and_bad_values_name_the_variable() -> None:
    launch = launch_from_env({})
    assert (launch.launcher, launch.rank, launch.world_size) == ("none", 0, 1)
    with pytest.raises(ConfigError, match="RANK"):
        launch_from_env({"RANK": "one", "WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match="rank got 2"):
        launch_from_env({"RANK": "2", "WORLD_SIZE": "2"})


# -- NCCL_* and GLOO_* variables ----------------------------------------------------------------

@pytest.mark.parametrize("spec,used", [
    ("eth", ["eth0", "eth1"]), ("=eth0", ["eth0"]), ("^docker,lo", ["eth0", "eth1", "ib0"]),
    ("^=docker0", ["eth0", "eth1", "ib0", "lo"]), ("ib,eth1", ["eth1", "ib0"]),
    ("nonexistent0", []), ("=eth", [])])
def test_socket_ifname_follows_nccls_prefix_rules(spec: str, used: list[str]) -> None:
    assert interfaces_matching(spec, IFACES) == used


def test_gloo_socket_ifname_is_exact() -> None:
    assert interfaces_matching("eth", IFACES, exact=True) == []
    assert interfaces_matching("eth1", IFACES, exact=True) == ["eth1"]


def test_absent_interface_is_an_error_present_one_is_fine() -> None:
    bad = check_environment({"NCCL_SOCKET_IFNAME": "nonexistent0"}, _facts(), backend="nccl")
    errors = [f for f in bad if f.severity == "error"]
    assert [f.variable for f in errors] == ["NCCL_SOCKET_IFNAME"]
    assert "nonexistent0" in errors[0].message and "eth0" in errors[0].fix
    good = check_environment({"NCCL_SOCKET_IFNAME": "eth"}, _facts(), backend="nccl")
    assert not [f for f in good if f.severity == "error"]
    gloo = check_environment({"GLOO_SOCKET_IFNAME": "eth"}, _facts(), backend="gloo")
    assert _codes(gloo)["socket_ifname_no_match"] == ["error"]


def test_a_typo_names_the_variable_meant() -> None:
    found = check_environment({"NCCL_SOCKET_IFNAM": "eth0"}, _facts(), backend="nccl")
    typo = [f for f in found if f.code == "nccl_unknown_variable"]
    assert len(typo) == 1 and typo[0].severity == "warning"
    assert "NCCL_SOCKET_IFNAME" in typo[0].message and typo[0].variable == "NCCL_SOCKET_IFNAM"


def test_an_unknown_name_far_from_any_is_only_info() -> None:
    found = check_environment({"NCCL_FROBNICATE": "1"}, _facts(), backend="nccl")
    assert _codes(found)["nccl_unknown_variable"] == ["info"]


def test_documented_names_are_not_flagged() -> None:
    env = {"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "INFO", "NCCL_NET_GDR_LEVEL": "PHB"}
    assert "nccl_unknown_variable" not in _codes(check_environment(env, _facts(),
                                                                   backend="nccl"))


def test_disabled_transports_warn_and_renamed_torch_names_warn() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "0",
           "NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"}
    found = check_environment(env, _facts(), backend="nccl")
    disabled = sorted(f.variable or "" for f in found if f.code == "nccl_transport_disabled")
    assert disabled == ["NCCL_IB_DISABLE", "NCCL_P2P_DISABLE"]
    renamed = [f for f in found if f.code == "nccl_renamed_by_torch"]
    assert renamed and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in renamed[0].fix


def test_nccl_debug_unset_is_a_hint_for_nccl_only() -> None:
    assert "nccl_debug_unset" in _codes(check_environment({}, _facts(), backend="nccl"))
    assert "nccl_debug_unset" not in _codes(check_environment({}, _facts(), backend="gloo"))
    bad = check_environment({"NCCL_DEBUG": "LOUD"}, _facts(), backend="nccl")
    assert _codes(bad)["nccl_debug_value"] == ["warning"]


# -- the host ----------------------------------------------------------------------------------

def test_tiny_shm_in_a_container_warns() -> None:
    found = check_environment({}, _facts(shm_total_bytes=64 * 2**20, in_container=True),
                              backend="nccl")
    shm = [f for f in found if f.code == "shm_small"]
    assert len(shm) == 1 and shm[0].severity == "warning" and "64 MiB" in shm[0].message
    assert "--shm-size" in shm[0].fix
    assert "shm_small" not in _codes(check_environment({}, _facts(), backend="nccl"))


def test_memlock_limit_warns_for_nccl_informs_for_gloo() -> None:
    limited = _facts(memlock_soft_bytes=8 * 2**20)
    assert _codes(check_environment({}, limited, backend="nccl"))["memlock_limited"] == [
        "warning"]
    assert _codes(check_environment({}, limited, backend="gloo"))["memlock_limited"] == ["info"]
    assert "memlock_limited" not in _codes(check_environment({}, _facts(), backend="nccl"))


def test_two_local_ranks_on_one_gpu_are_named() -> None:
    claims = [DeviceClaim(rank=0, host="a", local_rank=0, device_id="GPU-1",
                          visible_devices="0"),
              DeviceClaim(rank=1, host="a", local_rank=1, device_id="GPU-1",
                          visible_devices="0"),
              DeviceClaim(rank=2, host="b", local_rank=0, device_id="GPU-1",
                          visible_devices=None),
              DeviceClaim(rank=3, host="a", local_rank=2, device_id=None, visible_devices=None)]
    found = shared_devices(claims)
    assert len(found) == 1 and found[0].severity == "error"
    assert "rank 0" in found[0].message and "rank 1" in found[0].message
    assert "rank 2" not in found[0].message
    assert shared_devices(claims[2:]) == []


def test_read_host_facts_reads_the_given_paths(tmp_path: Path) -> None:
    net = tmp_path / "net"
    for name in ("lo", "eth7"):
        (net / name).mkdir(parents=True)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / ".dockerenv").write_text("")
    facts = read_host_facts(shm_path=str(tmp_path), net_path=str(net),
                            root=str(tmp_path / "root"))
    assert facts.interfaces == ("eth7", "lo") and facts.in_container
    assert facts.shm_total_bytes is not None and facts.shm_total_bytes > 0
    missing = read_host_facts(shm_path=str(tmp_path / "none"), net_path=str(tmp_path / "x"),
                              root=str(tmp_path))
    assert missing.shm_total_bytes is None and missing.interfaces == ()
