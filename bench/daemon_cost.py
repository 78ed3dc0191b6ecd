"""The node daemon's own cost: CPU and memory of `lamplighter supervise` with 8 simulated GPUs at 1 s and
4 trainer processes it watches. Target: under 1% of a core, under 100 MB RSS.

    .venv/bin/python bench/daemon_cost.py [--seconds 30] [--gpus 8] [--trainers 4] [--poll 1.0]

The trainers are real Slurm step tasks on the project's test cluster (one group job, 4 tasks on node n1,
`--overcommit` because a test node has 2 CPUs), so the daemon discovers, verifies and adopts them as it
would on a cluster; each writes a step heartbeat every 0.2 s. The GPU probe workers are separate processes
by design (one per GPU, killable): their CPU and RSS are reported next to the daemon's own.

The job carries a job.json and a lighthouse.json naming a real Lighthouse (lighthouse/main.py), so the
daemon reads both and the Lighthouse's /status every poll as it would for a torchft job. Those are read
by forked helpers as the job's user (supervisor/user_reads): the zygote and its helpers are reported on
their own, RSS and USS (a helper shares the zygote's pages; USS is what it adds).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.results_io import write_result
from lamplighter.configs.job_file import job_file_doc
from lamplighter.configs.schema import JobConfig, LighthouseConfig
from lamplighter.configs.slurm_names import group_job_name, lighthouse_job_name
from lamplighter.gpusim.build import ensure_built, sim_env
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.testcluster import ClusterError, running_cluster, slurm_installed, wait_until
from lamplighter.lighthouse.spawn import fast_command, lighthouse_argv
from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.slurm.actions import SlurmActions
from lamplighter.supervisor.status_socket import StatusError, read_status
from lamplighter.system.ports import accepts_connections, free_port

NODE = "n1"
LIGHTHOUSE_NODE = "n2"
JOB = "bench"
DUMMY = """\
import os, time
from pathlib import Path
from lamplighter.rundir.contract import RunPaths, write_json_atomic
paths = RunPaths(Path(os.environ["LAMPLIGHTER_RUN_DIR"]))
rid, rank, step = int(os.environ["LAMPLIGHTER_REPLICA_ID"]), int(os.environ.get("SLURM_PROCID", "0")), 0
while True:
    step += 1
    write_json_atomic(paths.heartbeat(rid, rank), {"step": step, "time": time.time(), "pid": os.getpid()})
    time.sleep(0.2)
"""


def lighthouse_script(root: Path, port: int) -> Path:
    """The job's Lighthouse as its own Slurm job on LIGHTHOUSE_NODE, as `lamplighter submit` places it: the
    daemon reads a /status page only from where the job's own Lighthouse job runs."""
    argv = lighthouse_argv(LighthouseConfig(host="127.0.0.1"), port, fast_command())
    script = root / "lighthouse.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name={lighthouse_job_name(JOB)}\n#SBATCH --nodelist={LIGHTHOUSE_NODE}\n"
        f"#SBATCH --output={root}/lighthouse-%j.out\nexec {shlex.join(argv)}\n"
    )
    return script


def group_script(root: Path, trainers: int, lighthouse: str) -> Path:
    """One lamplighter-named group job with `trainers` tasks on NODE, carrying the trainer contract's env,
    its job.json and a lighthouse.json naming `lighthouse`."""
    run_dir = root / "run"
    run_dir.mkdir()
    job = JobConfig(
        name=JOB,
        run_dir=str(run_dir),
        trainer={"command": ["{python}", str(root / "dummy.py")]},
        # The Lighthouse has no replicas: no step ever commits, so no hang may be called within the bench.
        health={"progress": "lighthouse", "hang_timeout_s": 3600, "startup_timeout_s": 3600},
    )
    write_json_atomic(run_dir / "job.json", job_file_doc(job))
    write_json_atomic(RunPaths(run_dir).lighthouse(), {"address": lighthouse})
    (root / "dummy.py").write_text(DUMMY)
    script = root / "group.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name={group_job_name(JOB, 0)}\n#SBATCH --nodelist={NODE}\n#SBATCH --ntasks={trainers}\n"
        f"#SBATCH --overcommit\n#SBATCH --output={root}/group-%j.out\n"
        f"export LAMPLIGHTER_JOB={JOB} LAMPLIGHTER_REPLICA_ID=0 LAMPLIGHTER_ATTEMPT=0 LAMPLIGHTER_RUN_DIR={run_dir}\n"
        f"export LAMPLIGHTER_CONFIG={run_dir / 'job.json'}\n"
        f"exec srun --overcommit {sys.executable} {root / 'dummy.py'}\n"
    )
    return script


def tree(pid: int) -> list[psutil.Process]:
    """The daemon (first) and its GPU probe workers: its user readers are counted on their own."""
    p = psutil.Process(pid)
    readers = {r.pid for r in user_readers(p)}
    return [p, *(c for c in p.children(recursive=True) if c.pid not in readers)]


def cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def mem_mb(procs: list[psutil.Process], uss: bool = False) -> float:
    """Their RSS, or their USS: the memory only they hold (a forked helper shares its zygote's pages, which
    its RSS counts)."""
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().uss if uss else p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def user_readers(daemon: psutil.Process) -> list[psutil.Process]:
    """The zygote (forked, not exec'd: the daemon's command line) and the helpers it forked."""
    zygotes = [c for c in daemon.children() if c.cmdline() == daemon.cmdline()]
    return [p for z in zygotes for p in (z, *z.children())]


def measure(
    root: Path, seconds: float, gpus: int, trainers: int, poll: float, source: Path | None = None
) -> dict[str, Any]:
    """source: a checkout whose lamplighter the daemon runs (--compare-with), instead of this one."""
    lib = ensure_built().parent.parent
    sd = StateDir(root / "gpus")
    sd.init(gpus)
    port = free_port()
    with running_cluster(root / "cluster", nodes=2) as cluster:
        api = SlurmActions(cluster.cli())
        lighthouse = api.submit(lighthouse_script(root, port))
        try:
            wait_until(lambda: accepts_connections("127.0.0.1", port), 60, f"the Lighthouse on port {port}")
            job = api.submit(group_script(root, trainers, f"http://127.0.0.1:{port}"))
            wait_until(lambda: api.job(job).state == "RUNNING", 60, "the group job running")
            sock = root / "status.sock"
            cfg = {
                "node_name": NODE,
                "state_dir": str(root / "state"),
                "status_socket": str(sock),
                "slurm_conf": str(cluster.conf_path),
                "metrics": {"enabled": True, "host": "127.0.0.1", "port": 0},
                "health": {"poll_interval_s": poll},
            }
            (root / "node.yaml").write_text(yaml.safe_dump(cfg))
            env = sim_env(lib, sd.root, dict(os.environ, SLURM_CONF=str(cluster.conf_path)))
            if source is not None:
                env["PYTHONPATH"] = str(source)  # ahead of the editable install's finder (and run from there:
                # `-m` puts the working directory, this checkout, first)
            with open(root / "daemon.log", "wb") as log:
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "lamplighter", "supervise", "--config", str(root / "node.yaml")],
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd=source,
                )
            try:

                def status() -> dict[str, Any]:
                    if daemon.poll() is not None:
                        raise RuntimeError(f"daemon exited {daemon.returncode}; see {root / 'daemon.log'}")
                    try:
                        return read_status(sock, timeout=5)
                    except StatusError:
                        return {}

                def settled() -> bool:
                    st = status()
                    gs = st.get("gpus", [])
                    jobs = st.get("jobs", [])
                    return (
                        len(st.get("trainers", [])) == trainers
                        and len(gs) == gpus
                        and all(g["status"] == "ok" for g in gs)
                        # its job.json applied, its Lighthouse named and answering: every user read is in the cycle
                        and any(
                            j["config_error"] is None and j["lighthouse"] and not j["lighthouse_error"] for j in jobs
                        )
                    )

                try:
                    wait_until(
                        settled,
                        90,
                        f"{trainers} trainers adopted, {gpus} GPUs healthy, its job.json and Lighthouse read",
                    )
                except ClusterError as e:
                    st = status()
                    seen = {k: st.get(k) for k in ("trainers", "jobs", "gpus")}
                    raise ClusterError(f"{e}; the daemon's status: {json.dumps(seen)}") from None
                time.sleep(2 * poll)  # let the start-up cycles pass before the window opens
                procs = tree(daemon.pid)
                c0, d0, t0, cyc0 = cpu_s(procs), cpu_s(procs[:1]), time.monotonic(), status()["cycles"]
                main = psutil.Process(daemon.pid)
                readers = user_readers(main)
                r0 = cpu_s(readers)
                rss_daemon, rss_all, rss_readers, uss_readers = [], [], [], []
                while time.monotonic() - t0 < seconds:
                    time.sleep(1.0)
                    procs, readers = tree(daemon.pid), user_readers(main)
                    rss_daemon.append(mem_mb(procs[:1]))
                    rss_all.append(mem_mb(procs))
                    rss_readers.append(mem_mb(readers))
                    uss_readers.append(mem_mb(readers, uss=True))
                c1, d1, t1, st = cpu_s(procs), cpu_s(procs[:1]), time.monotonic(), status()
                r1 = cpu_s(readers)
                torch_loaded = any("torch" in m.path for m in main.memory_maps())
                daemon_only = main.cpu_times()
                result = {
                    "config": {
                        "gpus": gpus,
                        "trainers": trainers,
                        "poll_interval_s": poll,
                        "window_s": round(t1 - t0, 2),
                    },
                    "cycles": st["cycles"] - cyc0,
                    "trainers_adopted": len(st["trainers"]),
                    "cpu_core_fraction_daemon_and_workers": (c1 - c0) / (t1 - t0),
                    "cpu_core_fraction_daemon": (d1 - d0) / (t1 - t0),
                    "cpu_s_daemon_total_since_start": daemon_only.user + daemon_only.system,
                    "rss_mb_daemon": max(rss_daemon),
                    "rss_mb_daemon_and_workers": max(rss_all),
                    "user_readers": {
                        "processes": len(readers),
                        "cpu_core_fraction": (r1 - r0) / (t1 - t0),
                        "rss_mb": max(rss_readers),
                        "uss_mb": max(uss_readers),
                    },
                    "processes": len(procs),  # the daemon and its GPU probe workers
                    "daemon_maps_torch": torch_loaded,
                    "targets": {"cpu_core_fraction": 0.01, "rss_mb": 100},
                }
            finally:
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
                    daemon.wait(timeout=30)
                api.cancel(job)
        finally:
            api.cancel(lighthouse)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument(
        "--compare-with",
        type=Path,
        metavar="CHECKOUT",
        help="also measure the daemon of another checkout (e.g. `git worktree add /tmp/before HEAD~1`), first, "
        "in the same run; its numbers go under `compared` in the result",
    )
    args = ap.parse_args()
    if args.compare_with is not None and not (args.compare_with / "lamplighter" / "__init__.py").is_file():
        ap.error(f"--compare-with {args.compare_with}: not a lamplighter checkout (no lamplighter/__init__.py)")
    missing = slurm_installed()
    if missing:
        print(f"real Slurm not available: {missing}", file=sys.stderr)
        return 2
    compared = None
    if args.compare_with is not None:
        with tempfile.TemporaryDirectory(prefix="ll-daemon-cost-", dir="/tmp") as tmp:
            compared = measure(Path(tmp), args.seconds, args.gpus, args.trainers, args.poll, args.compare_with)
        rev = subprocess.run(["git", "-C", str(args.compare_with), "rev-parse", "--short", "HEAD"], capture_output=True)
        compared["checkout"] = {"path": str(args.compare_with), "commit": rev.stdout.decode().strip() or None}
        if compared["user_readers"]["processes"]:
            print(f"--compare-with {args.compare_with}: its daemon forked user readers; was it this checkout's?")
    with tempfile.TemporaryDirectory(prefix="ll-daemon-cost-", dir="/tmp") as tmp:
        result = measure(Path(tmp), args.seconds, args.gpus, args.trainers, args.poll)
    if compared is not None:
        result["compared"] = compared
    path = write_result("daemon_cost", result)
    print(json.dumps(result, indent=2))
    print(
        f"daemon alone {100 * result['cpu_core_fraction_daemon']:.2f}%, daemon + {result['processes'] - 1} workers: {100 * result['cpu_core_fraction_daemon_and_workers']:.2f}% "
        f"of a core over {result['config']['window_s']} s ({result['cycles']} cycles); RSS daemon "
        f"{result['rss_mb_daemon']:.1f} MB, with workers {result['rss_mb_daemon_and_workers']:.1f} MB; "
        f"user readers {result['user_readers']['processes']}: {100 * result['user_readers']['cpu_core_fraction']:.2f}%, "
        f"USS {result['user_readers']['uss_mb']:.1f} MB -> {path}"
    )
    if compared is not None:
        print(
            f"compared ({compared['checkout']['commit']}): daemon alone {100 * compared['cpu_core_fraction_daemon']:.2f}%, "
            f"RSS {compared['rss_mb_daemon']:.1f} MB, user readers {compared['user_readers']['processes']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
