"""A restarted Lighthouse stands in for the replicas it saw alive, so the first to reconnect cannot quorum alone.

Soak finding: after a Lighthouse kill, the first group to reconnect formed a
quorum alone (min_replicas 1), committed a step no peer held, and was lost
before a peer healed from it: a committed step lost.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from realparts import wait_for

from lamplighter.configs.schema import JobConfig, LighthouseConfig
from lamplighter.lighthouse.main import find_extension, own_url
from lamplighter.lighthouse.memory import Memory, stand_in, to_stand_in_for
from lamplighter.lighthouse.spawn import Lighthouse, bind_address
from lamplighter.lighthouse.status import fetch_status
from lamplighter.system.ports import accepts_connections


def test_only_a_recent_memory_is_stood_in_for(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    Memory(100.0, ("a:1", "b:2")).save(path)
    mem = Memory.load(path)
    assert mem == Memory(100.0, ("a:1", "b:2"))
    assert to_stand_in_for(mem, now=130.0) == ("a:1", "b:2")
    assert to_stand_in_for(mem, now=100.0 + 61) == ()  # another incarnation of the job
    assert to_stand_in_for(None, now=0.0) == ()
    path.write_text("{torn")
    assert Memory.load(path) is None


def test_stand_in_beats_for_each_replica_until_the_grace_ends() -> None:
    now = [0.0]
    beats: list[tuple[float, str]] = []

    def beat(r: str) -> None:
        if now[0] == 0.0 and r == "a":
            raise ConnectionError("not listening yet")  # a failed beat is retried next round
        beats.append((now[0], r))

    def sleep(s: float) -> None:
        now[0] += s

    sent = stand_in(beat, ("a", "b"), grace_s=0.3, every_s=0.1, clock=lambda: now[0], sleep=sleep)
    assert sent == len(beats) == 5
    assert [r for t, r in beats if t == 0.0] == ["b"]
    assert {r for t, r in beats if t > 0} == {"a", "b"} and max(t for t, _ in beats) < 0.3


def _torchft() -> Any:
    spec = importlib.util.spec_from_file_location("torchft._torchft", find_extension())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_after_a_restart_the_first_group_back_waits_for_a_majority(tmp_path: Path) -> None:
    job = JobConfig.model_validate(
        {
            "name": "j",
            "lighthouse": {"port": 0, "join_timeout_ms": 200, "restart_grace_ms": 20_000},
            "torchft": {"quorum_timeout_s": 60},
            "health": {"hang_timeout_s": 90},
        }
    )
    memory = tmp_path / "lighthouse-memory.json"
    lh = Lighthouse(job.lighthouse, tmp_path / "lh.log", remember=memory)
    tf = _torchft()
    replicas = ("g0:aa", "g1:bb", "g2:cc")
    try:
        lh.start(time.time())
        lh.wait_ready(60)
        client = tf.LighthouseClient(lh.address, timedelta(seconds=5))

        def all_remembered() -> bool:
            for r in replicas:  # three live Managers heartbeating
                client.heartbeat(r, timedelta(seconds=2))
            mem = Memory.load(memory)
            return mem is not None and mem.replicas == replicas

        wait_for(all_remembered, 30, "the Lighthouse to remember the three replicas")
        lh.kill()
        lh.start(time.time())
        lh.wait_ready(60)
        # Its first round of stand-in heartbeats goes out right after it binds (a few ms): wait for it here.
        wait_for(
            lambda: {h.replica_id for h in fetch_status(lh.address).heartbeats} >= set(replicas),
            30,
            "the restarted Lighthouse to stand in for the replicas it remembers",
        )
        got: dict[str, list[str]] = {}

        def ask(rid: str) -> None:
            c = tf.LighthouseClient(lh.address, timedelta(seconds=5))
            q = c.quorum(
                replica_id=rid,
                timeout=timedelta(seconds=30),
                address="m",
                store_address="s",
                step=7,
                world_size=1,
                shrink_only=False,
            )
            got[rid] = [m.replica_id for m in q.participants]

        first = threading.Thread(target=ask, args=("g0:aa",))
        first.start()
        # Without the memory this quorum forms at once with g0 alone; with it, torchft waits for a majority.
        wait_for(
            lambda: "need at least half of 3" in fetch_status(lh.address).next_quorum,
            30,
            "the restarted Lighthouse to hold g0's quorum for a majority of the replicas it remembers",
        )
        assert first.is_alive() and got == {}
        second = threading.Thread(target=ask, args=("g1:bb",))
        second.start()
        first.join(30)
        second.join(30)
        assert got == {"g0:aa": ["g0:aa", "g1:bb"], "g1:bb": ["g0:aa", "g1:bb"]}
    finally:
        lh.kill()
    assert "standing in for 3 replicas" in (tmp_path / "lh.log").read_text()


@pytest.mark.integration
def test_a_lighthouse_listens_only_on_the_address_its_job_names_and_still_remembers(tmp_path: Path) -> None:
    """Bound to 127.0.0.2, not a wildcard: nothing answers on 127.0.0.1. Its own status poll (which keeps the
    memory) went to 127.0.0.1 whatever the bind, so a Lighthouse on any other address never remembered."""
    # local mode's setting: a Slurm job refuses a loopback host (its groups run on other nodes)
    settings = LighthouseConfig.model_validate({"host": "127.0.0.2", "port": 0})
    memory = tmp_path / "lighthouse-memory.json"
    lh = Lighthouse(settings, tmp_path / "lh.log", remember=memory)
    try:
        lh.start(time.time())
        lh.wait_ready(60)
        assert lh.address == f"http://127.0.0.2:{lh.port}"
        assert not accepts_connections("127.0.0.1", lh.port)
        client = _torchft().LighthouseClient(lh.address, timedelta(seconds=5))

        def remembered() -> bool:
            client.heartbeat("g0:aa", timedelta(seconds=2))
            mem = Memory.load(memory)
            return mem is not None and mem.replicas == ("g0:aa",)

        wait_for(remembered, 30, "the Lighthouse to remember the replica heartbeating on 127.0.0.2")
    finally:
        lh.kill()
    assert "reading its own status" not in (tmp_path / "lh.log").read_text()


def test_an_ipv6_bind_address_is_bracketed_once() -> None:
    assert bind_address("::1", 5) == "[::1]:5" and bind_address("[::1]", 5) == "[::1]:5"
    assert bind_address("head-1", 29510) == "head-1:29510"
    assert own_url("0.0.0.0", 7) == own_url("[::]", 7) == "http://127.0.0.1:7"
    assert own_url("[::1]", 7) == "http://[::1]:7" and own_url("10.0.0.2", 7) == "http://10.0.0.2:7"
