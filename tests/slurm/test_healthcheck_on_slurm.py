"""`lamplighter healthcheck` as Slurm runs it: HealthCheckProgram and Prolog on the real test cluster,
with simulated GPUs per node; and `lamplighter nodes` / `nodes resume` on what it drained."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from realparts import require_netns, require_slurm, wait_for

from lamplighter.commands.healthcheck import ENV_DRAIN_BARRIER
from lamplighter.gpusim.inject import clear, inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.testcluster import TestCluster, running_cluster
from lamplighter.slurm.actions import SlurmActions

pytestmark = pytest.mark.integration
GPUS = 2
SCHED = "sched_interval=1,bf_interval=1,batch_sched_delay=0,nohold_on_prolog_fail"


def wrapper(path: Path, gpus: Path, conf: Path, *extra: str, mode: str = "act") -> Path:
    """What an admin installs as HealthCheckProgram / Prolog (deploy/slurm/), plus the test's simulated GPUs.
    Each node's state (its action log) goes under state/<node> beside it, never the host's /var/lib."""
    node_yaml = path.with_suffix(".node.yaml")
    # Three nodes: the default max_drain_fraction (0.25) would allow no drain at all.
    node_yaml.write_text(f"slurm_conf: {conf}\nmax_drain_fraction: 0.5\nmode: {mode}\n")
    state = path.parent / "state"
    argv = [sys.executable, "-m", "lamplighter", "healthcheck", "--config", str(node_yaml), "--gpusim-root", str(gpus)]
    argv += extra
    path.write_text(
        "#!/bin/bash\n"
        f"export SLURM_CONF={shlex.quote(str(conf))}\n"
        f"export PATH={shlex.quote(os.environ['PATH'])}\n"
        f'exec {" ".join(shlex.quote(a) for a in argv)} --node "$SLURMD_NODENAME" '
        f'--set state_dir={shlex.quote(str(state))}/"$SLURMD_NODENAME" >>{shlex.quote(str(path))}.log 2>&1\n'
    )
    path.chmod(0o755)
    return path


def lamplighter(*args: str, conf: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", *args],
        env=dict(os.environ, SLURM_CONF=str(conf), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def gpu_folders(root: Path, nodes: int) -> Path:
    for i in range(1, nodes + 1):
        StateDir(root / f"n{i}").init(GPUS)
    return root


@pytest.fixture
def health_cluster(tmp_path: Path, gpusim_root: Path) -> Iterator[tuple[TestCluster, Path]]:
    require_slurm()
    root = tmp_path / "c"
    gpus = gpu_folders(tmp_path / "gpus", 3)
    prog = wrapper(tmp_path / "healthcheck.sh", gpus, root / "slurm.conf")
    conf = {"HealthCheckProgram": str(prog), "HealthCheckInterval": "5", "HealthCheckNodeState": "ANY"}
    with running_cluster(root, 3, conf=conf) as cluster:
        yield cluster, gpus


def test_health_check_program_drains_a_faulty_node_and_resume_needs_healthy_gpus(
    health_cluster: tuple[TestCluster, Path],
) -> None:
    cluster, gpus = health_cluster
    api = SlurmActions(cluster.cli())
    conf = cluster.conf_path
    assert not any(n.is_drained for n in api.nodes())
    inject(StateDir(gpus / "n2"), 1, "ecc-uncorrectable", count=2)
    n2 = wait_for(lambda: (n := api.node("n2")).is_drained and n, 60, "n2 drained by the health check")
    assert n2.reason is not None and n2.reason.startswith("lamplighter: healthcheck: GPU 1 ")
    assert "uncorrectable ECC +2" in n2.reason
    assert not api.node("n1").is_drained and not api.node("n3").is_drained

    listed = lamplighter("nodes", conf=conf)
    assert listed.returncode == 0 and "n2" in listed.stdout and "uncorrectable ECC +2" in listed.stdout
    assert "n1 " not in listed.stdout

    refused = lamplighter("nodes", "resume", "n2", "--gpusim-root", str(gpus), conf=conf)
    assert refused.returncode == 1, refused.stdout
    assert "refusing to resume n2: the fault persists" in refused.stderr and "uncorrectable ECC +2" in refused.stderr
    assert api.node("n2").is_drained

    clear(StateDir(gpus / "n2"))  # the GPU was reset: its counters are back to zero
    # The HealthCheckProgram finds n2 healthy again and leaves it drained: only `nodes resume` brings it back.
    log = gpus.parent / "healthcheck.sh.log"
    seen = len(log.read_text().splitlines())
    wait_for(
        lambda: any(
            line.startswith("lamplighter healthcheck: n2: healthy") for line in log.read_text().splitlines()[seen:]
        ),
        60,
        "a healthy pass of the health check on n2",
    )
    assert api.node("n2").is_drained
    # On the node itself (here: its name as slurmd would give it), NODE is this host.
    resumed = lamplighter("nodes", "resume", "--gpusim-root", str(gpus), conf=conf, SLURMD_NODENAME="n2")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed n2" in resumed.stdout
    assert not api.node("n2").is_drained

    # A node an admin drained is not lamplighter's to resume.
    api.drain("n3", "maintenance: new PSU")
    other = lamplighter("nodes", "resume", "n3", "--gpusim-root", str(gpus), conf=conf)
    assert other.returncode == 1 and "taken out by someone else" in other.stderr
    assert api.node("n3").reason == "maintenance: new PSU"


@pytest.fixture
def prolog_cluster(tmp_path: Path, gpusim_root: Path) -> Iterator[tuple[TestCluster, Path]]:
    require_slurm()
    root = tmp_path / "c"
    gpus = gpu_folders(tmp_path / "gpus", 3)
    prolog = wrapper(tmp_path / "prolog.sh", gpus, root / "slurm.conf", "--prolog")
    with running_cluster(root, 3, conf={"Prolog": str(prolog), "SchedulerParameters": SCHED}) as cluster:
        yield cluster, gpus


def test_prolog_fails_a_faulty_node_and_slurm_starts_the_job_elsewhere(
    prolog_cluster: tuple[TestCluster, Path], tmp_path: Path
) -> None:
    cluster, gpus = prolog_cluster
    api = SlurmActions(cluster.cli())
    inject(StateDir(gpus / "n1"), 0, "thermal", value=120)
    # n1 is the only node that can take the job at first.
    api.drain("n2", "test: busy")
    api.drain("n3", "test: busy")
    ran = tmp_path / "ran-on"
    script = tmp_path / "job.sbatch"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=ll-p-g0\n#SBATCH --requeue\n#SBATCH --output={tmp_path}/job-%j.out\n"
        f'echo "$SLURMD_NODENAME" >> {shlex.quote(str(ran))}\nexec sleep 300\n'
    )
    jid = api.submit(script)
    n1 = wait_for(lambda: (n := api.node("n1")).is_drained and n, 60, "n1 drained by the prolog")
    job = wait_for(lambda: (j := api.job(jid)).state == "PENDING" and j, 60, "the job back in the queue")
    assert "held" not in (job.reason or "").lower(), job.reason  # nohold_on_prolog_fail
    assert n1.reason is not None and n1.reason.startswith("lamplighter: healthcheck: GPU 0 ")  # ours, kept by Slurm
    api.resume("n2")
    job = wait_for(lambda: (j := api.job(jid)).running and j, 60, "the job running on n2")
    assert job.node_list == "n2"
    wait_for(lambda: ran.exists() and ran.read_text().split(), 30, "the job's body to start")
    assert ran.read_text().split() == ["n2"]  # it never ran on the faulty node
    print(f"n1 after the prolog: {n1.state}: {n1.reason}; job {jid}: {job.fields.get('Restarts')} restart(s)")


def observed_drains(state: Path, node: str) -> list[dict[str, object]]:
    import json

    log = state / node / "actions.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_observe_mode_drains_nothing_and_fails_no_job_start_and_logs_what_it_would_have_done(
    tmp_path: Path, gpusim_root: Path
) -> None:
    """deploy/README.md's rollout: with `mode: observe` the HealthCheckProgram and the Prolog of a faulty node
    drain nothing and let the job start there, and each writes the drain it would have made to the node's
    action log (the newcomer review of 2026-12-01, P1-4: they ignored the mode)."""
    require_slurm()
    gpus = gpu_folders(tmp_path / "gpus", 3)
    root = tmp_path / "c"
    check = wrapper(tmp_path / "healthcheck.sh", gpus, root / "slurm.conf", mode="observe")
    prolog = wrapper(tmp_path / "prolog.sh", gpus, root / "slurm.conf", "--prolog", mode="observe")
    conf = {
        "HealthCheckProgram": str(check),
        "HealthCheckInterval": "5",
        "HealthCheckNodeState": "ANY",
        "Prolog": str(prolog),
        "SchedulerParameters": SCHED,
    }
    inject(StateDir(gpus / "n1"), 0, "thermal", value=120)
    with running_cluster(root, 3, conf=conf) as cluster:
        api = SlurmActions(cluster.cli())
        api.drain("n2", "test: busy")
        api.drain("n3", "test: busy")
        script = tmp_path / "job.sbatch"
        script.write_text(
            f"#!/bin/bash\n#SBATCH --job-name=ll-o-g0\n#SBATCH --output={tmp_path}/job-%j.out\nexec sleep 300\n"
        )
        jid = api.submit(script)
        job = wait_for(lambda: (j := api.job(jid)).running and j, 60, "the job running on the faulty n1")
        assert job.node_list == "n1"
        state = tmp_path / "state"
        lines = wait_for(
            lambda: (
                {str(r["observation"]["type"]): r for r in observed_drains(state, "n1")}.keys()
                >= {"healthcheck", "prolog"}
                and observed_drains(state, "n1")
            ),
            60,
            "the health check and the prolog to log what they would have done",
        )
        assert {r["outcome"] for r in lines} == {"observed"} and {r["action"] for r in lines} == {"drain"}
        assert all(str(r["reason"]).startswith("would drain: lamplighter: healthcheck: GPU 0 ") for r in lines), lines
        n1 = api.node("n1")
        assert not n1.is_drained, (n1.state, n1.reason)
        assert api.job(jid).running  # its Prolog did not fail it
        assert "OBSERVE ONLY: would drain" in Path(f"{check}.log").read_text()


def test_a_threshold_every_node_fails_checked_on_every_node_at_once_drains_only_the_clusters_budget(
    tmp_path: Path, gpusim_root: Path
) -> None:
    """The newcomer review's P1-5: Slurm runs the HealthCheckProgram on every node at the same instant, so a
    limit each node checks before it drains lets all of them drain. Eight nodes, each in a network of its own,
    run the check at once, with a temperature limit every GPU exceeds, and every check reads the cluster before
    any drains (the test barrier); the budget is 2 (0.25 of 8): exactly 2 nodes stay drained, and every other
    says why not."""
    require_slurm()
    require_netns()
    nodes = 8
    gpus = gpu_folders(tmp_path / "gpus", nodes)
    go = tmp_path / "go"
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    with running_cluster(tmp_path / "c", nodes, netns=True) as cluster:
        node_yaml = tmp_path / "node.yaml"
        node_yaml.write_text(f"slurm_conf: {cluster.conf_path}\nmax_drain_fraction: 0.25\n")
        api = SlurmActions(cluster.cli())
        # A job runs on every node: neither a drain kept nor one undone may touch it (deploy/README).
        running = {}
        for i in range(1, nodes + 1):
            script = tmp_path / f"busy-n{i}.sh"
            script.write_text(f"#!/bin/bash\n#SBATCH --nodelist=n{i}\n#SBATCH --output=/dev/null\nexec sleep 600\n")
            running[f"n{i}"] = api.submit(script)
        wait_for(lambda: all(api.job(j).state == "RUNNING" for j in running.values()), 60, "a job on every node")
        procs = {}
        for i in range(1, nodes + 1):
            name = f"n{i}"
            check = [sys.executable, "-m", "lamplighter", "healthcheck", "--config", str(node_yaml)]
            check += [
                "--gpusim-root",
                str(gpus),
                "--node",
                name,
                "--json",
                "--set",
                "health.temperature_hotspot_max_c=1",
            ]
            check += ["--set", f"state_dir={tmp_path / 'state' / name}"]
            barrier = f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.01; done; exec {shlex.join(check)}"
            procs[name] = subprocess.Popen(
                cluster.node_argv(name, ["bash", "-c", barrier]),
                env=dict(os.environ, SLURM_CONF=str(cluster.conf_path), **{ENV_DRAIN_BARRIER: f"{arrived}:{nodes}"}),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        go.touch()
        outs = {}
        for name, p in procs.items():
            out, err = p.communicate(timeout=120)
            outs[name] = json.loads(out)
            assert p.returncode == 1, (name, err)  # faulty, whether drained or refused
        drained = sorted(n.name for n in api.nodes() if n.is_drained)
        said = {name: str(o["drain"]) for name, o in outs.items()}
        print({name: s[:90] for name, s in said.items()})
        assert len(drained) == 2, (drained, said)
        assert sorted(n for n, s in said.items() if s.startswith("drained: lamplighter: healthcheck: ")) == drained
        refused = {n: s for n, s in said.items() if n not in drained}
        assert all(s.startswith("NOT drained: drain undone: cluster drain budget spent") for s in refused.values()), (
            said
        )
        for name in refused:  # each node's action log holds its refusal, for `lamplighter why` and the on-call
            assert [r["outcome"] for r in observed_drains(tmp_path / "state", name)] == ["refused"]
        for name, job in running.items():
            info = api.job(job)
            assert (info.state, info.restarts, info.node_list) == ("RUNNING", 0, name), (name, info)


def test_a_prolog_past_the_budget_lets_the_job_start_and_slurm_drains_nothing(
    prolog_cluster: tuple[TestCluster, Path], tmp_path: Path
) -> None:
    """A failed Prolog makes Slurm drain the node itself (`Prolog error`), past lamplighter's budget: beyond the
    budget the Prolog lets the job start and says so."""
    cluster, gpus = prolog_cluster
    api = SlurmActions(cluster.cli())
    inject(StateDir(gpus / "n1"), 0, "thermal", value=120)
    api.drain("n2", "lamplighter: healthcheck: an earlier drain spends the budget (1 of 3 at 0.5)")
    api.drain("n3", "test: busy")
    script = tmp_path / "job.sbatch"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=ll-b-g0\n#SBATCH --output={tmp_path}/job-%j.out\nexec sleep 300\n"
    )
    jid = api.submit(script)
    job = wait_for(lambda: (j := api.job(jid)).running and j, 60, "the job running on n1")
    assert job.node_list == "n1"
    prolog_log = Path(f"{tmp_path / 'prolog.sh'}.log")
    log = wait_for(lambda: prolog_log.exists() and "starts" in (t := prolog_log.read_text()) and t, 60, "the Prolog")
    n1 = api.node("n1")
    assert not n1.is_drained, (n1.state, n1.reason)
    assert api.job(jid).running  # its Prolog did not fail it
    assert "NOT drained: drain limit reached" in log and "the job starts on this node" in log, log


def test_amdsmi_missing_drains_nothing_whatever_gpu_count_says_and_fails_no_job_start(tmp_path: Path) -> None:
    """deploy/README.md: "amdsmi missing is never a drain". The shipped node.yaml's `gpu_count: 8` on a node
    with no ROCm at all: the HealthCheckProgram and the Prolog say `unknown` (exit 3 and 0), Slurm drains
    nothing, the job starts (the newcomer review's P1-3 found "1 of 8 GPUs found" decided to drain)."""
    require_slurm()
    root = tmp_path / "c"
    node_yaml = tmp_path / "node.yaml"
    node_yaml.write_text(f"slurm_conf: {root / 'slurm.conf'}\nmax_drain_fraction: 0.5\ngpu_count: 8\n")
    scripts = {}
    for name, extra in (("healthcheck", ""), ("prolog", " --prolog")):
        path = tmp_path / f"{name}.sh"
        argv = [sys.executable, "-m", "lamplighter", "healthcheck", "--config", str(node_yaml)]
        path.write_text(
            "#!/bin/bash\n"
            f"export SLURM_CONF={shlex.quote(str(root / 'slurm.conf'))} ROCM_PATH=/nonexistent LD_LIBRARY_PATH=\n"
            f'{shlex.join(argv)}{extra} --node "$SLURMD_NODENAME" '
            f'--set state_dir={shlex.quote(str(tmp_path / "state"))}/"$SLURMD_NODENAME" >>{path}.log 2>&1\n'
            f'rc=$?; echo "exit $rc" >>{path}.log; exit $rc\n'
        )
        path.chmod(0o755)
        scripts[name] = path
    conf = {
        "HealthCheckProgram": str(scripts["healthcheck"]),
        "HealthCheckInterval": "5",
        "HealthCheckNodeState": "ANY",
        "Prolog": str(scripts["prolog"]),
        "SchedulerParameters": SCHED,
    }
    with running_cluster(root, 3, conf=conf) as cluster:
        api = SlurmActions(cluster.cli())
        script = tmp_path / "job.sbatch"
        script.write_text(
            f"#!/bin/bash\n#SBATCH --job-name=ll-u-g0\n#SBATCH --output={tmp_path}/job-%j.out\nexec sleep 300\n"
        )
        jid = api.submit(script)
        wait_for(lambda: api.job(jid).running, 60, "the job running")
        hc_log = Path(f"{scripts['healthcheck']}.log")
        pro_log = Path(f"{scripts['prolog']}.log")
        wait_for(lambda: hc_log.exists() and "exit 3" in hc_log.read_text(), 60, "a health check that could not check")
        wait_for(lambda: pro_log.exists() and "exit 0" in pro_log.read_text(), 60, "the Prolog")
        text = hc_log.read_text()
        assert "unknown" in text and "libamd_smi.so" in text and "drain" not in text, text
        assert "exit 0" in pro_log.read_text() and "unknown" in pro_log.read_text()
        # Slurm ignores a HealthCheckProgram's status (exit 3 here); a Prolog's non-zero one would drain.
        assert not any(n.is_drained for n in api.nodes()), [(n.name, n.state, n.reason) for n in api.nodes()]
        assert api.job(jid).running
