"""Where a Slurm job's Lighthouse listens: the node Slurm put it on, found there; a host the job names must be
that node's; one that cannot listen ends its job with one line (newcomer review P1-1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from lamplighter.configs.schema import JobConfig
from lamplighter.lighthouse.main import CANNOT_LISTEN, NodeAddressError, node_address
from lamplighter.slurm.submit.render import LISTEN_TRIES, render_job


def job(**kw: object) -> JobConfig:
    return JobConfig.model_validate({"name": "minimal", "groups": {"count": 2}, **kw})


def test_the_smallest_job_binds_the_node_it_lands_on() -> None:
    j = job(slurm={"partition": "gpu"})
    assert j.lighthouse.host is None and j.lighthouse.local_host == "127.0.0.1"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]"])
def test_a_loopback_lighthouse_on_slurm_is_refused(host: str) -> None:
    with pytest.raises(ValidationError, match="loopback address"):
        job(lighthouse={"host": host}, slurm={"head_node": "n1"})


def test_a_host_without_the_node_that_holds_it_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"without slurm\.head_node the Lighthouse job may land on any node"):
        job(lighthouse={"host": "head01"})


def test_a_host_that_is_not_the_head_node_is_refused_and_one_that_is_passes() -> None:
    with pytest.raises(ValidationError, match=r"is not slurm.head_node \('head02'\)"):
        job(lighthouse={"host": "head01"}, slurm={"head_node": "head02"})
    assert job(lighthouse={"host": "head01.cluster"}, slurm={"head_node": "head01"}).lighthouse.host == "head01.cluster"
    # An address cannot be checked here: the Lighthouse says so at run time if it is not its node's.
    assert job(lighthouse={"host": "10.1.2.3"}, slurm={"head_node": "head01"}).lighthouse.host == "10.1.2.3"


def test_local_mode_and_bare_metal_keep_their_hosts() -> None:
    assert job().lighthouse.local_host == "127.0.0.1"  # `lamplighter local` of any job: this machine's loopback
    bare = {"cluster": "c", "etcd": {"endpoints": ["http://127.0.0.1:2379"], "insecure_lab": True}}
    j = job(placement="bare-metal", run_dir="/r", bare_metal=bare, lighthouse={"host": "127.0.0.1", "port": 29510})
    assert j.lighthouse.local_host == "127.0.0.1"


def test_a_node_whose_name_resolves_only_to_loopback_has_no_address_to_bind() -> None:
    with pytest.raises(NodeAddressError, match="resolves only to loopback"):
        node_address("localhost")
    with pytest.raises(NodeAddressError, match="does not resolve"):
        node_address("no-such-host.invalid")


def test_the_lighthouse_on_a_loopback_only_node_stops_with_one_line(tmp_path: Path) -> None:
    """This machine's own host name maps to 127.0.0.1 alone (as Debian's 127.0.1.1 does): nothing to bind."""
    try:
        node_address()
    except NodeAddressError:
        pass
    else:
        pytest.skip("this machine's host name resolves to an address other than loopback")
    argv = [sys.executable, "-m", "lamplighter.lighthouse.main", "--bind-node-port", "0"]
    proc = subprocess.run([*argv, "--min_replicas", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == CANNOT_LISTEN
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot listen on this node" in lines[0] and "lighthouse.host" in lines[0]


NEVER_LISTENS = f"""\
#!/bin/bash
# As the release helper: never returns by itself (the script must end without it).
if [ "$2" = lamplighter.slurm.submit.release ]; then exec /bin/sleep 1000; fi
echo start >> "$RECORD_TO"
echo "lighthouse_main: cannot listen on 10.9.9.9:0: Cannot assign requested address" >&2
exit {CANNOT_LISTEN}
"""


def test_a_lighthouse_that_cannot_listen_ends_its_job_not_a_restart_loop(tmp_path: Path) -> None:
    fake = tmp_path / "fakepy"
    fake.write_text(NEVER_LISTENS)
    fake.chmod(0o755)
    j = job(run_dir=str(tmp_path / "run"), slurm={"head_node": "n1"})
    script = render_job(j, tmp_path / "out", python=str(fake))[0]
    starts = tmp_path / "starts"
    # The script's back-off between tries, recorded instead of slept (10.8 s in all).
    bin_dir, slept = tmp_path / "bin", tmp_path / "slept"
    bin_dir.mkdir()
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "$@" >> {slept}\n')
    (bin_dir / "sleep").chmod(0o755)
    proc = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "RECORD_TO": str(starts), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert proc.returncode != 0
    assert len(starts.read_text().splitlines()) == LISTEN_TRIES
    assert slept.read_text().split() == [f"{n}.2" for n in range(1, LISTEN_TRIES)]  # longer after each try
    ending = [line for line in proc.stderr.splitlines() if line.startswith("lamplighter: the Lighthouse cannot listen")]
    assert len(ending) == 1 and "ending its job" in ending[0]
