"""bench/heal_bandwidth.py at a small size: every transport delivers the state bit-identical, and the
result record holds what the report quotes. No timing assertions: the machine is shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
TRANSPORTS = ["http", "http-torchft", "http-c4", "pg", "pg-inplace", "pg-inplace-model", "tcp"]


def test_digest_sees_one_flipped_bit(bench: ModuleType) -> None:
    """The verification is only worth something if the hash changes with the data."""
    pytest.importorskip("torch")
    from bench import heal_peers

    state = heal_peers.build_state(300_000, 50_000, seed=3)
    before = heal_peers.digest(state)
    assert heal_peers.digest(heal_peers.build_state(300_000, 50_000, seed=3)) == before
    w = state["user"]["default"]["model"]["layers.0.weight"]
    w.view(dtype=__import__("torch").int32)[5] ^= 1
    assert heal_peers.digest(state) != before


@pytest.mark.integration
@pytest.mark.heavy(seconds=18)
def test_every_transport_arrives_bit_identical(tmp_path: Path) -> None:
    pytest.importorskip("torchft")
    out = tmp_path / "heal.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.heal_bandwidth", "--sizes", "4MB", "--reps", "1"]
        + [
            "--transports",
            ",".join(TRANSPORTS),
            "--out",
            str(out),
            "--no-plot",
            "--profile-max",
            "0",
            "--timeout-s",
            "60",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[heal]" in proc.stderr  # progress goes to stderr
    data = json.loads(out.read_text())
    assert data["name"] == "heal_bandwidth"
    assert {"commit", "torch", "torchft", "host_cpus"} <= set(data["environment"])
    assert data["memcpy"]["4 MB"]["copy_gbps"]["median"] > 0
    assert data["target"]["link_GBps"] == 50
    rows = {r["transport"]: r for r in data["results"]}
    assert sorted(rows) == sorted(TRANSPORTS)
    for tp, r in rows.items():
        assert r["verified"] is True, tp
        assert [rep["verified"] for rep in r["reps"]] == [True], tp
        assert r["size"] == "4 MB" and 3_900_000 <= r["state_bytes"] <= 4_000_000, tp
        assert r["n_tensors"] >= 3, tp
        for key in ("heal_s", "gbps"):
            assert set(r[key]) == {"median", "min", "max", "n"}, (tp, key)
            assert r[key]["median"] > 0, (tp, key)
        assert r["sender_maxrss_mb"] > 0 and r["receiver_maxrss_mb"] > 0, tp
    # HTTP's time split into socket I/O and (de)serialisation, per side.
    for tp in ("http", "http-torchft"):
        for side in ("sender_split", "receiver_split"):
            assert set(rows[tp]["split"][side]) == {"socket_io_s", "other_s", "total_s"}, (tp, side)
