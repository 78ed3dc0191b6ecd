"""The torch-free replica against a real Lighthouse: groups form one quorum, commit, and leave it when killed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lamplighter.configs.schema import LighthouseConfig
from lamplighter.lighthouse.spawn import Lighthouse
from lamplighter.system.process_tree import kill_tree


def steps(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [r for line in path.read_text().splitlines() if line.endswith("}") and "qid" in (r := json.loads(line))]


def groups_in(files: list[Path], size: int, after: float = 0.0) -> set[int]:
    """Groups that held a quorum of `size` they asked for after `after`."""
    return {r["g"] for f in files for r in steps(f) if r["n"] == size and r["t0"] > after}


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.1)


@pytest.mark.integration
def test_groups_share_a_quorum_commit_and_the_survivors_leave_a_killed_one_out(tmp_path: Path) -> None:
    lh = Lighthouse(LighthouseConfig(), tmp_path / "lighthouse.log")
    lh.start(time.monotonic())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        lh.wait_ready(30)

        def replica(groups: str) -> subprocess.Popen[bytes]:
            argv = [sys.executable, "-m", "lamplighter.lab.scale_replica", "--lighthouse", lh.address]
            argv += ["--groups", groups, "--out", str(tmp_path / f"{groups}.jsonl"), "--step-s", "0.2"]
            with open(tmp_path / f"{groups}.err", "wb") as err:
                p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
            procs.append(p)
            return p

        many, alone = replica("0-2"), replica("3")
        files = [tmp_path / "0-2.jsonl", tmp_path / "3.jsonl"]
        wait_for(lambda: groups_in(files, 4) == {0, 1, 2, 3}, "4 groups in one quorum")
        assert any(r["c"] and r["s"] > 0 for r in steps(tmp_path / "3.jsonl")), "no commit"
        maps = Path(f"/proc/{alone.pid}/maps").read_text()
        assert "libtorch" not in maps, "the replica loaded torch"

        alone.kill()
        alone.wait()
        t_kill = time.time()
        wait_for(lambda: groups_in(files[:1], 3, t_kill) == {0, 1, 2}, "the 3 survivors in a quorum without group 3")
        assert many.poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                kill_tree([p])
        lh.kill()
