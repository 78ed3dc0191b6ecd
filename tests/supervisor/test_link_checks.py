"""Links training uses, down, missing or flapping, and fewer GPUs than the node names: node faults that drain.

On a fake sysfs tree (files as the kernel writes them), and on a real veth
link in a network namespace taken down and flapped for real (root and `ip`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from netns_links import ip, read_in

from lamplighter.configs.loader import ConfigError, parse
from lamplighter.configs.schema import NetworkConfig, NodeConfig
from lamplighter.policy.node_faults import NODE_FAULT_ACTIONS, gpu_count_fault, gpus_found, response
from lamplighter.supervisor.checks.links import LinkCheck, SysfsLinks, judge_links
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.system.sysfs import LinkReading, read_links

CFG = NetworkConfig(interfaces=["ens1"], rdma=["mlx5_0"], flap_max_changes=4, flap_window_s=60)


def netdev(root: Path, name: str, operstate: str, carrier: str | None, changes: int) -> None:
    d = root / "class" / "net" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "operstate").write_text(operstate + "\n")
    (d / "carrier_changes").write_text(f"{changes}\n")
    if carrier is None:
        (d / "carrier").unlink(missing_ok=True)  # the kernel answers EINVAL while the interface is set down
    else:
        (d / "carrier").write_text(carrier + "\n")


def rdma_port(root: Path, device: str, port: int, state: str, phys: str, downed: int) -> None:
    d = root / "class" / "infiniband" / device / "ports" / str(port)
    (d / "counters").mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(state + "\n")
    (d / "phys_state").write_text(phys + "\n")
    (d / "counters" / "link_downed").write_text(f"{downed}\n")


def test_sysfs_readings_of_up_down_and_missing_links(tmp_path: Path) -> None:
    netdev(tmp_path, "ens1", "up", "1", 2)
    netdev(tmp_path, "ens2", "lowerlayerdown", "0", 5)
    netdev(tmp_path, "ib0", "unknown", "1", 0)  # a driver with no operstate: the carrier decides
    rdma_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 0)
    rdma_port(tmp_path, "mlx5_0", 2, "1: DOWN", "3: Disabled", 1)
    got = {r.name: r for r in read_links(tmp_path, ["ens1", "ens2", "ib0", "eth9"], ["mlx5_0", "bnxt_re0:1"])}
    assert [n for n, r in got.items() if r.up] == ["ens1", "ib0", "mlx5_0:1"]
    assert got["ens2"].state == "lowerlayerdown" and got["ens2"].changes == 5
    assert not got["eth9"].present and not got["bnxt_re0:1"].present
    assert got["mlx5_0:2"].state == "1: DOWN, 3: Disabled" and got["mlx5_0:2"].changes == 1


def test_a_down_or_missing_link_is_a_fault_naming_it(tmp_path: Path) -> None:
    netdev(tmp_path, "ens1", "down", None, 3)
    check = LinkCheck(SysfsLinks(("ens1",), ("mlx5_0",), tmp_path), CFG)
    faults = check.observe(0.0)
    assert [(f.link, f.kind) for f in faults] == [("ens1", "link-down"), ("mlx5_0:1", "link-missing")]
    assert "link ens1 down (down, " in faults[0].reason and "does not exist" in faults[1].reason
    netdev(tmp_path, "ens1", "up", "1", 4)
    rdma_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 0)
    assert check.observe(1.0) == []


def test_an_rdma_port_that_keeps_going_down_is_flapping_though_active_when_read(tmp_path: Path) -> None:
    netdev(tmp_path, "ens1", "up", "1", 0)
    rdma_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 2)
    check = LinkCheck(SysfsLinks(("ens1",), ("mlx5_0",), tmp_path), CFG)
    assert check.observe(0.0) == []
    rdma_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 5)  # three drops between two reads, up again
    assert check.observe(10.0) == []
    rdma_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 7)  # five in 20 s: over flap_max_changes 4
    [f] = check.observe(20.0)
    assert (f.link, f.kind) == ("mlx5_0:1", "link-flapping") and "5 link changes in 20 s" in f.reason


def reading(name: str, up: bool, changes: int) -> LinkReading:
    return LinkReading(name, "net", True, up, "up" if up else "down", changes, f"/sys/class/net/{name}")


def test_flapping_is_counted_on_the_kernels_counter_within_the_window() -> None:
    cfg = NetworkConfig(interfaces=["ens1"], flap_max_changes=4, flap_window_s=60)
    history: tuple[tuple[float, str, int], ...] = ()
    faults, history = judge_links(0.0, [reading("ens1", True, 10)], history, cfg)
    assert faults == []
    # Four changes (two flaps) between two cycles, the link up again when read: tolerated.
    faults, history = judge_links(10.0, [reading("ens1", True, 14)], history, cfg)
    assert faults == []
    # A fifth change within the window: flapping, though the link is up right now.
    faults, history = judge_links(20.0, [reading("ens1", True, 15)], history, cfg)
    [f] = faults
    assert f.kind == "link-flapping" and "5 link changes in 20 s" in f.reason and "now up" in f.reason
    # Once the window has passed over the changes, it is quiet again.
    faults, history = judge_links(85.0, [reading("ens1", True, 15)], history, cfg)
    assert faults == []
    # A counter that went back (driver reload) starts over rather than counting backwards.
    faults, history = judge_links(90.0, [reading("ens1", True, 0)], history, cfg)
    assert faults == [] and history[-1] == (90.0, "ens1", 0)


def test_fewer_gpus_than_the_node_names_is_a_drain_with_the_count() -> None:
    low = gpu_count_fault(8, 7)
    assert low is not None and low.reason == "7 of 8 GPUs found (gpu_count 8 in the node config)"
    assert gpu_count_fault(8, 8) is None and gpu_count_fault(None, 3) is None and gpu_count_fault(8, None) is None
    assert response(low.kind) == "drain"
    [link] = judge_links(0.0, [reading("ens1", False, 0)], (), CFG)[0]
    assert response(link.kind) == "drain" and "link ens1 down" in link.reason


def test_a_cycle_that_read_no_gpu_has_no_count_and_a_lost_gpu_is_not_found() -> None:
    """One rule for the daemon and the HealthCheckProgram: amdsmi missing reports one placeholder (GPU 0,
    unknown), which is not one GPU found of 8."""
    missing = [GpuObservation(0, "unknown", "amdsmi-install", "amdsmi is not installed")]
    assert gpus_found(missing) is None and gpus_found([]) is None
    assert gpu_count_fault(8, gpus_found(missing)) is None
    seen = [GpuObservation(i, "ok", "healthy", "") for i in range(6)] + [GpuObservation(6, "fault", "lost", "gone")]
    assert gpus_found(seen) == 6
    low = gpu_count_fault(8, gpus_found(seen))
    assert low is not None and low.reason.startswith("6 of 8 GPUs found")
    assert set(NODE_FAULT_ACTIONS) == {"gpu-count", "link-missing", "link-down", "link-flapping"}


def test_node_config_names_gpus_and_links_and_refuses_bad_names() -> None:
    cfg = parse(NodeConfig, "gpu_count: 8\nnetwork:\n  interfaces: [ens50f0np0]\n  rdma: [bnxt_re0, 'mlx5_1:1']\n")
    assert cfg.gpu_count == 8 and cfg.network.rdma == ["bnxt_re0", "mlx5_1:1"]
    for bad in ("network: {interfaces: ['../etc']}", "network: {rdma: ['mlx5_0:x']}", "gpu_count: 0"):
        with pytest.raises(ConfigError):
            parse(NodeConfig, bad)


# -- a real link: a veth pair in a network namespace of its own ------------------------------------------


def test_a_real_veth_link_taken_down_and_flapping_in_a_network_namespace(netns: str) -> None:
    cfg = NetworkConfig(interfaces=["lla0"], flap_max_changes=4, flap_window_s=600)
    [up] = read_in(netns, ["lla0"])
    assert up.present and up.up and up.state == "up", up
    faults, history = judge_links(0.0, [up], (), cfg)
    assert faults == []

    ip(netns, "link", "set", "llb0", "down")  # the far end goes: this end loses its carrier
    [down] = read_in(netns, ["lla0"])
    assert not down.up and down.state == "lowerlayerdown" and down.changes == (up.changes or 0) + 1
    faults, history = judge_links(1.0, [down], history, cfg)
    assert [(f.link, f.kind) for f in faults] == [("lla0", "link-down")] and "lowerlayerdown" in faults[0].reason

    for _ in range(2):  # up, down, up, down, up: five changes since the first reading
        ip(netns, "link", "set", "llb0", "up")
        ip(netns, "link", "set", "llb0", "down")
    ip(netns, "link", "set", "llb0", "up")
    [back] = read_in(netns, ["lla0"])
    assert back.up
    faults, history = judge_links(2.0, [back], history, cfg)
    assert [(f.link, f.kind) for f in faults] == [("lla0", "link-flapping")], faults
    assert response(faults[0].kind) == "drain" and "lla0" in faults[0].reason

    [missing] = read_in(netns, ["lla9"])
    assert not missing.present
