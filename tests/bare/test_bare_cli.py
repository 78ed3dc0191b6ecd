"""A bare-metal cluster driven as its users drive it: `lamplighter supervise` daemons (role bare-metal) on a
real etcd, and `lamplighter submit|status|cancel|hosts` from the command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from lamplighter.gpusim.build import sim_env
from lamplighter.gpusim.inject import inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.etcd_cluster import EtcdCluster

pytestmark = pytest.mark.integration

MARK = "lamplighter-bare-cli-test-trainer"


def until(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)
    return got


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "lamplighter", *args], capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise AssertionError(f"lamplighter {' '.join(args)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def trainers(run_dir: Path) -> list[psutil.Process]:
    """The trainers of the job whose run directory is `run_dir`: the trainer process itself (its command
    line is the job's command), never its setpriv or shell stage (`sh -c ... <the command>`, and the
    shell's children before they exec mkdir or mv), nor a trainer of another test of this file running
    side by side (make test: pytest-xdist) with the same MARK."""
    want = trainer_command(run_dir)
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if (p.info["cmdline"] or []) == want:
            found.append(p)
    return found


def trainer_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-c", "import time; time.sleep(600)", MARK, str(run_dir)]


@pytest.fixture
def cluster(tmp_path: Path, gpusim_root: Path) -> Iterator[tuple[Path, dict[str, subprocess.Popen[bytes]], Path]]:
    with EtcdCluster(tmp_path / "etcd", size=1) as etcd:
        daemons: dict[str, subprocess.Popen[bytes]] = {}
        for host in ("h1", "s1"):
            gpus = StateDir(tmp_path / host / "gpus")
            gpus.init(2)  # each host its own simulated GPUs, seen through the real amdsmi
            node = {
                "role": "bare-metal",
                "node_name": host,
                "state_dir": str(tmp_path / host),
                "health": {"poll_interval_s": 0.2},
                "bare_metal": {
                    "cluster": "cli",
                    "etcd": {"endpoints": etcd.endpoints, "timeout_s": 0.5, "insecure_lab": True},
                    "hosts": ["h1"],
                    "spares": ["s1"],
                    "lease_ttl_s": 2,
                    "fence_margin_s": 0.7,
                    # Submitted as root (no etcd user here): its trainer is this interpreter, which only root
                    # reaches (tests/security runs trainers as another user).
                    "root_trainers": True,
                },
            }
            (tmp_path / f"{host}.yaml").write_text(yaml.safe_dump(node))
            log = open(tmp_path / f"{host}.log", "wb")  # noqa: SIM115 - kept open for the daemon's life
            daemons[host] = subprocess.Popen(
                [sys.executable, "-m", "lamplighter", "supervise", "--config", str(tmp_path / f"{host}.yaml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**sim_env(gpusim_root, gpus.root), "PYTHONUNBUFFERED": "1"},
            )
        job = {
            "name": "cli-job",
            "run_dir": str(tmp_path / "run"),
            "placement": "bare-metal",
            "bare_metal": {"cluster": "cli", "etcd": {"endpoints": etcd.endpoints, "insecure_lab": True}},
            "groups": {"count": 1},
            "lighthouse": {"host": "127.0.0.1", "port": 29511},
            "trainer": {"command": trainer_command(tmp_path / "run")},
        }
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))

        def every_host_alive() -> bool:
            rows = json.loads(cli("hosts", "--config", str(tmp_path / "h1.yaml"), "--json").stdout)
            return all(r["alive"] for r in rows)

        try:
            # A job submitted before its hosts registered would be placed on the spare (correctly, but not
            # what these tests follow).
            until(every_host_alive, 30, "both host daemons registered in etcd")
            yield tmp_path / "job.yaml", daemons, tmp_path
        finally:
            for p in daemons.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=20)


def status(job: Path) -> dict[str, Any]:
    return json.loads(cli("status", str(job), "--json").stdout)


def test_submit_place_take_out_cancel_from_the_command_line(cluster: Any) -> None:
    job, _, tmp = cluster
    out = cli("submit", str(job))
    assert "submitted cli-job to bare-metal cluster cli" in out.stdout
    again = cli("submit", str(job), "--set", "restart.standby=1", check=False)
    assert again.returncode == 1 and "already on cluster cli" in again.stderr
    assert "note: restart.standby (1) applies to `lamplighter local` only" in again.stderr
    until(lambda: status(job)["groups"]["0"]["host"] == "h1", 20, "group 0 placed on h1")
    [first] = until(lambda: trainers(tmp / "run"), 20, "the trainer runs")
    assert first.environ()["LAMPLIGHTER_ATTEMPT"] == "1"

    cli("hosts", "--config", str(tmp / "h1.yaml"), "out", "h1", "--reason", "fan replaced")
    g = until(lambda: (s := status(job)["groups"]["0"])["host"] == "s1" and s, 20, "group 0 moved to the spare")
    assert g["epoch"] == 2 and "taken out: fan replaced" in g["reason"]
    until(lambda: not first.is_running() or first.status() == psutil.STATUS_ZOMBIE, 20, "h1 kills its stale trainer")
    [second] = until(lambda: trainers(tmp / "run"), 20, "the spare runs the group")
    assert second.environ()["LAMPLIGHTER_ATTEMPT"] == "2"
    rows = {r["host"]: r for r in json.loads(cli("hosts", "--config", str(tmp / "h1.yaml"), "--json").stdout)}
    assert rows["h1"]["out"] == "fan replaced" and rows["s1"]["groups"] == ["cli-job/g0"]

    cli("cancel", str(job))
    assert status(job)["submitted"] is False
    until(lambda: trainers(tmp / "run") == [], 20, "every trainer of the cancelled job is gone")
    cli("hosts", "--config", str(tmp / "h1.yaml"), "resume", "h1")
    assert json.loads(cli("hosts", "--config", str(tmp / "h1.yaml"), "--json").stdout)[0]["out"] is None


def test_a_gpu_fault_takes_the_host_out_and_its_group_moves(cluster: Any) -> None:
    job, _, tmp = cluster
    cli("submit", str(job))
    [first] = until(lambda: trainers(tmp / "run"), 30, "the trainer runs on h1")

    def h1_gpus() -> str | None:
        rows = json.loads(cli("hosts", "--config", str(tmp / "h1.yaml"), "--json").stdout)
        return next(r["gpus"] for r in rows if r["host"] == "h1")

    # A fault counts from the GPU check's first reading (its baseline): wait until it has one.
    until(lambda: h1_gpus() == "2/2 ok", 30, "h1's GPU check reads both GPUs healthy")
    inject(StateDir(tmp / "h1" / "gpus"), 1, "ecc-uncorrectable")
    g = until(lambda: (s := status(job)["groups"]["0"])["host"] == "s1" and s, 30, "group 0 moved to the spare")
    assert "h1 was taken out: GPU 1" in g["reason"] and "uncorrectable ECC" in g["reason"]
    until(lambda: not first.is_running() or first.status() == psutil.STATUS_ZOMBIE, 10, "h1 killed its trainer")
    rows = {r["host"]: r for r in json.loads(cli("hosts", "--config", str(tmp / "h1.yaml"), "--json").stdout)}
    assert "uncorrectable ECC" in rows["h1"]["out"]


def test_a_killed_host_daemon_takes_its_trainer_with_it_and_the_group_moves(cluster: Any) -> None:
    job, daemons, tmp = cluster
    cli("submit", str(job))
    [first] = until(lambda: trainers(tmp / "run"), 30, "the trainer runs")
    daemons["h1"].kill()  # SIGKILL: no cleanup of any kind
    daemons["h1"].wait()
    until(lambda: not first.is_running() or first.status() == psutil.STATUS_ZOMBIE, 10, "the trainer died with it")
    g = until(lambda: (s := status(job)["groups"]["0"])["host"] == "s1" and s, 20, "group 0 moved to the spare")
    assert "h1's lease expired" in g["reason"]
    until(
        lambda: [p for p in trainers(tmp / "run") if p.environ().get("LAMPLIGHTER_ATTEMPT") == "2"],
        20,
        "the spare runs it",
    )
