"""Compute daemons watch each other's slurmd and tell the head where to look; the head acts only on its own
probe, and probes a fixed number of nodes a cycle however large the cluster (neighbour_watch.py)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from fake_node import FakeNode

from lamplighter.configs.schema import NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.parsers import QueueEntry
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.loop import HeadLoop
from lamplighter.supervisor.neighbour_watch import (
    MAX_REPORT_BYTES,
    RING_FILE,
    SUSPECTS_DIR,
    NeighbourWatch,
    publish_ring,
    read_suspects,
    sweep,
    watched_by,
)
from lamplighter.supervisor.state_store import DaemonState

Addr = tuple[str, int]


class Now:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_every_node_is_watched_by_two_others_one_of_them_half_the_ring_away() -> None:
    for n in range(3, 40):
        names = [f"n{i:03d}" for i in range(n)]
        watchers: dict[str, list[str]] = {x: [] for x in names}
        for me in names:
            mine = watched_by(me, names)
            assert len(mine) == 2 and me not in mine
            for x in mine:
                watchers[x].append(me)
        assert all(len(w) == 2 for w in watchers.values())
        # The two watchers of a node are not next to each other in name order (a rack): they die apart.
        i = names.index("n001")
        assert {watchers["n001"][0], watchers["n001"][1]} == {names[(i + 1) % n], names[(i - n // 2) % n]}
    assert watched_by("a", ["a", "b"]) == ["b"]
    assert watched_by("a", ["a"]) == [] and watched_by("z", ["a", "b"]) == []


def test_the_sweep_covers_every_node_in_turn_a_few_a_cycle() -> None:
    names = [f"n{i}" for i in range(10)]
    seen: list[str] = []
    cursor = 0
    for _ in range(3):
        picked, cursor = sweep(names, cursor, 4)
        assert len(picked) == 4
        seen += picked
    assert set(seen) == set(names)  # ceil(10 / 4) = 3 cycles
    assert sweep(names, 7, 0) == (names, 0) and sweep(names, 3, 10) == (names, 0)


class Slurmd:
    """A listening TCP socket: what the probe sees of a slurmd (it only connects)."""

    def __init__(self) -> None:
        self.sock = self._listen(0)
        self.port = self.sock.getsockname()[1]

    @staticmethod
    def _listen(port: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(16)
        return s

    def stop(self) -> None:
        self.sock.close()

    def start(self) -> None:
        self.sock = self._listen(self.port)


@pytest.fixture
def slurmds() -> Iterator[dict[str, Slurmd]]:
    ds = {n: Slurmd() for n in ("n1", "n2", "n3")}
    yield ds
    for d in ds.values():
        d.stop()


def test_a_neighbour_whose_slurmd_stops_answering_is_reported_then_taken_back(
    tmp_path: Path, slurmds: dict[str, Slurmd]
) -> None:
    clock = Now(1000.0)
    publish_ring(tmp_path, "head", {n: ("127.0.0.1", d.port) for n, d in slurmds.items()})
    watch = NeighbourWatch(tmp_path, "n1", owner=os.getuid(), clock=clock)  # watches n3 and n2
    watch.cycle()
    assert watch.silent == {} and not (tmp_path / SUSPECTS_DIR / "n1.json").exists()
    slurmds["n2"].stop()
    clock.t += 0.5
    watch.cycle()
    assert watch.silent == {"n2": 1000.5}
    assert read_suspects(tmp_path, clock.t, owner=os.getuid()) == {"n2": {"n1"}}
    slurmds["n2"].start()
    clock.t += 0.5
    watch.cycle()
    assert watch.silent == {} and read_suspects(tmp_path, clock.t, owner=os.getuid()) == {}
    # A ring that changes is read again; a node left out of it is no longer watched.
    publish_ring(tmp_path, "head", {n: ("127.0.0.1", slurmds[n].port) for n in ("n1", "n3")})
    slurmds["n2"].stop()
    watch.cycle()
    assert watch.silent == {}


def test_a_report_still_naming_a_node_is_refreshed_and_a_stopping_daemon_takes_it_back(tmp_path: Path) -> None:
    clock = Now(1000.0)
    publish_ring(tmp_path, "head", {"n1": ("127.0.0.1", 1), "n2": ("127.0.0.1", 2)})
    dead: set[Addr] = {("127.0.0.1", 2)}

    def probe(addrs: Iterable[Addr], timeout: float) -> set[Addr]:
        return set(addrs) - dead

    watch = NeighbourWatch(tmp_path, "n1", owner=os.getuid(), clock=clock, probe=probe)
    report = tmp_path / SUSPECTS_DIR / "n1.json"
    watch.cycle()
    assert json.loads(report.read_text())["written_at"] == 1000.0
    clock.t += 20.0  # rewritten at its refresh, so it never reads as a dead reporter's
    watch.cycle()
    assert json.loads(report.read_text()) == {"reporter": "n1", "written_at": 1020.0, "silent": {"n2": 1000.0}}
    watch.close()
    assert not report.exists()


def test_the_head_reads_only_fresh_bounded_reports_of_roots(tmp_path: Path) -> None:
    folder = tmp_path / SUSPECTS_DIR
    folder.mkdir()

    def report(name: str, at: float, silent: dict[str, float]) -> Path:
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"reporter": name, "written_at": at, "silent": silent}))
        return path

    report("n1", 1000.0, {"n2": 990.0})
    report("n4", 1000.0, {"n2": 995.0, "n5": 999.0})
    report("n6", 900.0, {"n7": 890.0})  # a reporter dead for minutes
    report("n8", 2000.0, {"n7": 1999.0})  # from the future: a clock stepped
    os.chown(report("n9", 1000.0, {"n7": 999.0}), 65534, 65534)  # not root's: anyone could have written it
    big = report("n10", 1000.0, {"n7": 999.0})
    big.write_text(
        json.dumps({"reporter": "n10", "written_at": 1000.0, "silent": {"n7": 1, "x": "y" * MAX_REPORT_BYTES}})
    )
    (folder / "n11.json").write_text("{not json")
    assert read_suspects(tmp_path, 1001.0) == {"n2": {"n1", "n4"}, "n5": {"n4"}}
    assert read_suspects(tmp_path / "nowhere", 1001.0) == {}


def head_with(tmp_path: Path, clock: Now, n_nodes: int, sweep_size: int) -> tuple[HeadLoop, FakeSlurm]:
    names = [f"n{i:03d}" for i in range(n_nodes)]
    slurm = FakeSlurm(names, clock=clock)
    for i in range(n_nodes):
        script = tmp_path / f"g{i}.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --job-name=ll-llama-g{i}\n")
        slurm.submit(script)
    cfg = NodeConfig.model_validate(
        {
            "role": "head",
            "state_dir": str(tmp_path / "state"),
            "cluster_status_dir": str(tmp_path / "status"),
            "slurm_poll_s": 5,
            "node_silence_s": 3,
            "head_probe_sweep": sweep_size,
            "max_drain_fraction": 0.5,
        }
    )
    (tmp_path / "status").mkdir()
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, None, ActionLog("head", lambda line: None))
    return HeadLoop(cfg, slurm, executor, clock, tmp_path / "logs"), slurm


def shared_with_another_tenant(slurm: FakeSlurm, node: str) -> None:
    """Another user's job holds the node beside the group's (the fake places one job a node): the head drains
    it and moves the group, never marks it DOWN."""
    theirs = QueueEntry(99, "their-job", "RUNNING", None, node, "alice")
    own = slurm.jobs_on
    slurm.jobs_on = lambda n: [*own(n), *([theirs] if n == node else [])]  # type: ignore[method-assign]


class Probe:
    """The head's probe: which slurmds answer (all but `dead`), and what it was asked each cycle."""

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.asked: list[set[str]] = []

    def __call__(self, addrs: list[Addr], timeout: float) -> set[Addr]:
        self.asked.append({a[0] for a in addrs})
        return {a for a in addrs if a[0] not in self.dead}


@pytest.mark.parametrize("n_nodes", [20, 200])
def test_the_head_probes_as_many_nodes_a_cycle_at_200_nodes_as_at_20(tmp_path: Path, n_nodes: int) -> None:
    clock = Now(1000.0)
    head, _ = head_with(tmp_path, clock, n_nodes, sweep_size=4)
    head.probe = probe = Probe()
    for _ in range(n_nodes // 4):
        head.cycle()
        clock.t += 0.5
    assert {len(asked) for asked in probe.asked} == {4}
    assert set().union(*probe.asked) == {f"n{i:03d}" for i in range(n_nodes)}  # each in turn
    ring = json.loads((tmp_path / "status" / RING_FILE).read_text())["nodes"]
    assert sorted(ring) == [f"n{i:03d}" for i in range(n_nodes)] and ring["n007"] == ["n007", 6818]


def test_a_reported_node_is_drained_on_the_heads_own_silence_and_a_false_report_costs_nothing(
    tmp_path: Path,
) -> None:
    clock = Now(1000.0)
    head, slurm = head_with(tmp_path, clock, 40, sweep_size=2)
    head.probe = probe = Probe()
    head.cycle()
    probe.dead = {"n017"}  # its slurmd went silent; n023 answers the head although a neighbour says not
    suspects = tmp_path / "status" / SUSPECTS_DIR
    suspects.mkdir()
    for name, silent in (("n016", "n017"), ("n003", "n023")):
        (suspects / f"{name}.json").write_text(
            json.dumps({"reporter": name, "written_at": clock.t, "silent": {silent: clock.t}})
        )
    drained = []
    for _ in range(10):
        clock.t += 0.5
        for r in head.cycle():
            drained.append((r["action"], r["target"]))
        assert len(probe.asked[-1]) <= 2 + 2  # the sweep's two and the two named
    # Taken out on the head's own probes (DOWN: only lamplighter's groups hold it), the false report costs nothing.
    assert {a for a, t in drained if t == "n017"} & {"drain", "mark_down"} and all(t != "n023" for _, t in drained)
    assert "lamplighter" in (slurm.node("n017").reason or "")
    assert slurm.node("n023").reason is None


def test_with_no_sweep_set_the_head_probes_every_node_every_cycle_as_before(tmp_path: Path) -> None:
    clock = Now(1000.0)
    head, _ = head_with(tmp_path, clock, 12, sweep_size=0)
    head.probe = probe = Probe()
    head.cycle()
    head.cycle()
    assert [len(a) for a in probe.asked] == [12, 12]
    assert not (tmp_path / "status" / RING_FILE).exists()


def test_a_node_drained_and_emptied_for_silence_does_not_hold_the_head_at_a_slurm_read_every_cycle(
    tmp_path: Path,
) -> None:
    """Found counting the RPCs a node crash costs: the head read Slurm every cycle (6 RPCs a second) for as
    long as any node it had drained stayed dead, which on a large cluster is always."""
    clock = Now(1000.0)
    head, slurm = head_with(tmp_path, clock, 8, sweep_size=0)
    head.probe = probe = Probe()
    reads: list[float] = []
    real = slurm.all_jobs
    slurm.all_jobs = lambda prefix: reads.append(clock.t) or real(prefix)  # type: ignore[method-assign]
    shared_with_another_tenant(slurm, "n005")
    head.cycle()
    probe.dead = {"n005"}
    acted = []
    for _ in range(40):  # 20 s, a cycle every 0.5 s
        clock.t += 0.5
        acted += [(r["action"], r["target"]) for r in head.cycle()]
    assert acted[0] == ("drain", "n005") and [a for a, _ in acted[1:]] == ["requeue"]
    drained_at = next(t for t in reads if t > 1003.0)  # silent since 1000.5, node_silence_s 3
    after = [t for t in reads if t > drained_at + 1.0]
    assert len(after) <= 4, after  # every slurm_poll_s (5 s) once its group has moved, not every cycle
    assert "n005" in head.silent_since  # still watched: resumed once it answers


def test_a_compute_daemon_watches_its_neighbours_from_its_cycle(tmp_path: Path, slurmds: dict[str, Slurmd]) -> None:
    status = tmp_path / "status"
    status.mkdir()
    (tmp_path / "node").mkdir()
    node = FakeNode(tmp_path / "node", name="n1", cluster_status_dir=str(status))
    try:
        publish_ring(status, "head", {n: ("127.0.0.1", d.port) for n, d in slurmds.items()})
        slurmds["n3"].stop()
        node.run(1)
        assert node.loop.status()["silent_neighbours"] == {"n3": pytest.approx(node.clock.t, abs=2)}
        assert read_suspects(status, node.clock.t) == {"n3": {"n1"}}
    finally:
        node.close()
    assert read_suspects(status, node.clock.t) == {}  # a daemon that stops takes its report back


def test_a_node_back_from_silence_is_resumed_on_a_fresh_read_of_slurm(tmp_path: Path) -> None:
    """Seen in the every-fault e2e once reads slowed: resumed on a view up to 5 s old, in which a crashed and
    rebooted node was still up to Slurm, the node ended drained."""
    clock = Now(1000.0)
    head, slurm = head_with(tmp_path, clock, 8, sweep_size=0)
    head.probe = probe = Probe()
    reads: list[float] = []
    real = slurm.nodes
    slurm.nodes = lambda: reads.append(clock.t) or real()  # type: ignore[method-assign]
    shared_with_another_tenant(slurm, "n005")
    head.cycle()
    probe.dead = {"n005"}
    resumed_at = []
    for i in range(60):
        clock.t += 0.5
        if i == 30:
            probe.dead = set()  # its slurmd answers again
        resumed_at += [clock.t for r in head.cycle() if r["action"] == "resume"]
    assert len(resumed_at) == 1 and resumed_at[0] in reads  # one resume, on a read of its own cycle
    assert not slurm.node("n005").is_drained


def test_a_node_back_from_silence_is_resumed_as_soon_as_slurm_has_it_back(tmp_path: Path) -> None:
    """Seen in CI: its slurmd answered a little before Slurm had it back; resumed only at the next periodic read
    (up to 5 s later), the every-fault e2e found the node still drained."""
    clock = Now(1000.0)
    head, slurm = head_with(tmp_path, clock, 8, sweep_size=0)
    head.probe = probe = Probe()
    shared_with_another_tenant(slurm, "n005")
    head.cycle()
    probe.dead = {"n005"}
    resumed_at: list[float] = []
    back_at = None
    for i in range(80):
        clock.t += 0.5
        if i == 10:
            slurm.crash_node("n005")  # drained by then; Slurm marks it down after its own timeout
        if i == 40:
            probe.dead = set()  # its slurmd answers...
        if i == 43:
            slurm.restart_node("n005")  # ...and registers, 1.5 s later
            back_at = clock.t
        resumed_at += [clock.t for r in head.cycle() if r["action"] == "resume"]
    assert back_at is not None and len(resumed_at) == 1
    assert resumed_at[0] - back_at <= 0.5  # the cycle after, not the next slurm_poll_s
    assert not slurm.node("n005").is_drained


def test_a_node_marked_down_for_silence_is_resumed_once_it_answers_and_slurm_hears_it(tmp_path: Path) -> None:
    """Only the group's job held it, so the head marked it DOWN; with ReturnToService=1 (Slurm's default) Slurm
    never returns a node someone marked DOWN: the head does, as it does a node it drained."""
    clock = Now(1000.0)
    head, slurm = head_with(tmp_path, clock, 8, sweep_size=0)
    head.probe = probe = Probe()
    head.cycle()
    probe.dead = {"n005"}
    acted = []
    for i in range(30):
        clock.t += 0.5
        if i == 15:
            probe.dead = set()  # its slurmd answers the head, and Slurm hears it (DOWN, no `*`)
        acted += [(r["action"], r["target"]) for r in head.cycle()]
    assert acted[0] == ("mark_down", "n005") and ("resume", "n005") in acted
    assert slurm.node("n005").available
