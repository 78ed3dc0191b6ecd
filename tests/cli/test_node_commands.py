"""node-status reads a real daemon status socket; an unexpected error is one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.commands.cli import main
from lamplighter.supervisor.status_socket import StatusServer

REPO = Path(__file__).resolve().parents[2]

DOC = {
    "node": "n7",
    "pid": 4242,
    "metrics_port": 9464,
    "role": "compute",
    "cycles": 57,
    "gpus": [
        {"gpu": 0, "status": "ok", "kind": "healthy", "reason": "GPU 0 healthy"},
        {"gpu": 1, "status": "fault", "kind": "ecc-uncorrectable", "reason": "GPU 1 uncorrectable ECC +2"},
    ],
    "trainers": [
        {"pid": 100, "job_id": "41", "job": "llama", "replica_id": 2, "attempt": 1, "root": True},
        {"pid": 101, "job_id": "41", "job": "llama", "replica_id": 2, "attempt": 1, "root": False},
    ],
    "jobs": [{"job": "llama", "progress": "auto", "lighthouse": "http://head01:29510", "lighthouse_error": None}],
    "pending": [],
    "recent_events": [{"kind": "give_up", "target": "40", "reason": "budget spent"}],
}


def test_node_status_reads_the_daemons_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "run" / "status.sock"
    server = StatusServer(sock, lambda: DOC).start()
    try:
        assert main(["node-status", "--socket", str(sock)]) == 0
        out = capsys.readouterr().out
        assert main(["node-status", "--socket", str(sock), "--json"]) == 0
        assert '"node": "n7"' in capsys.readouterr().out
    finally:
        server.close()
    assert out.startswith("node n7: gpu-fault (compute daemon, pid 4242, 57 cycles, metrics port 9464)")
    assert "gpus: 1 of 2 ok" in out and "GPU 1 uncorrectable ECC +2" in out
    assert "trainers: 1 task root(s)" in out and "llama g2 attempt 1  pid 100  Slurm job 41" in out
    assert "job llama: progress from auto, Lighthouse http://head01:29510" in out
    assert "give_up 40: budget spent" in out


def test_node_status_without_a_daemon_says_what_to_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node-status", "--socket", str(tmp_path / "status.sock")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not there (is the daemon running?)" in err
    assert "systemctl status lamplighter-node" in err
    node = tmp_path / "node.yaml"
    node.write_text(f"status_socket: {tmp_path / 'x' / 'status.sock'}\n")
    assert main(["node-status", "--config", str(node)]) == 1
    assert str(tmp_path / "x" / "status.sock") in capsys.readouterr().err


def test_hosts_with_a_missing_certificate_is_one_line_naming_it(tmp_path: Path) -> None:
    """The review's traceback: etcd client certificates that are not there (the password file is)."""
    password = tmp_path / "etcd-password"
    password.write_text("secret\n")
    password.chmod(0o600)
    text = (REPO / "configs" / "bare-host.yaml").read_text().replace("/etc/lamplighter/etcd-password", str(password))
    config = tmp_path / "bare-host.yaml"
    config.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "lamplighter", "hosts", "--config", str(config), "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LAMPLIGHTER_DEBUG": ""},
    )
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("lamplighter hosts: error: ") and "/etc/lamplighter/etcd-ca.crt" in line, line


def test_nodes_resume_defaults_to_this_host() -> None:
    from lamplighter.commands.cli import build_parser

    args = build_parser().parse_args(["nodes", "resume"])
    assert args.node is None  # run_resume takes local_node_name: SLURMD_NODENAME, node_name, the host name
