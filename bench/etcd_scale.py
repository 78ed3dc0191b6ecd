"""etcd requests each bare-metal host daemon makes, against the host count (#31 item 2 and 3, bare metal).

N hosts of the host lab (lab/bare_hosts.py: each in its own network, PID, mount and UTS namespace, with
its own address on a bridge, as `make demo-bare` runs them), each running its host daemon as its systemd
unit would (`lamplighter supervise`, role bare-metal), against one real etcd on the bridge. One job of
N-1 groups, whose trainers are sleeping processes, and one spare. etcd runs without TLS and auth
(`insecure_lab`): what is counted is the requests, and a certificate per host would not change them.

The requests are etcd's own count (every member's grpc_server_started_total from its /metrics, which
counts each unary request and each stream once: a watch is one however long it lasts); the bench
itself sends etcd nothing while it counts (it watches the trainers through /proc). Per size: the
requests a second per host at steady state over `--window-s`, the same while one host dies (every
process of its namespace killed at once; the spare takes its group after the lease), the time from the
death to the group's trainer running on the spare, and each host daemon's CPU and RSS. The lease is the
default (8 s, margin 2 s: a renewal every 3 s) unless --ttl-s is given.

    python -m bench.etcd_scale [--hosts 4,16,64] [--window-s 20] [--out bench/results/etcd_scale.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.results_io import RESULTS, environment
from lamplighter.bare.keys import Keys
from lamplighter.configs.bare_metal import BareMetalNodeConfig
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.bare_hosts import HostLab
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import ENV_REPLICA_ID, ENV_RUN_DIR

SLEEP_MARK = "time.sleep(360000)"  # what tells the job's trainers from every other process here
SLEEPER = [sys.executable, "-c", f"import time; {SLEEP_MARK}"]
USER = "bench"  # the etcd user the job is submitted as (etcd auth off: the lab's insecure mode)
CLUSTER = "scale"
JOB = "scale"
POLL_S = 0.5  # the host daemons' poll interval (health.poll_interval_s)
GOAL = 0.5  # #31: at most 0.5 etcd requests a second per host at steady state


def _defaults() -> tuple[int, float]:
    f = BareMetalNodeConfig.model_fields
    return int(f["lease_ttl_s"].default), float(f["fence_margin_s"].default)


def trainers(run_dir: Path) -> dict[int, int]:
    """Group -> the pid of its trainer, from /proc (the job's sleeping processes)."""
    out: dict[int, int] = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) != 3 or cmd[2] != f"import time; {SLEEP_MARK}":
            continue
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get(ENV_RUN_DIR) == str(run_dir) and ENV_REPLICA_ID in env:
            out[int(env[ENV_REPLICA_ID])] = p.pid
    return out


class HostFleet:
    """N hosts of the host lab, each with its host daemon, against one etcd on the bridge."""

    def __init__(self, lab: HostLab, etcd: EtcdCluster, folder: Path, ttl_s: int, margin_s: float) -> None:
        self.lab, self.etcd, self.folder = lab, etcd, folder
        self.hosts, self.spares = lab.names[:-1], lab.names[-1:]
        self.ttl_s, self.margin_s = ttl_s, margin_s
        self.keys = Keys(CLUSTER)
        self.run_dir = folder / "run"
        self.procs: dict[str, psutil.Process] = {}

    def boot(self, host: str) -> None:
        folder = self.folder / "hosts" / host
        node = {
            "role": "bare-metal",
            "node_name": host,
            "state_dir": str(folder / "state"),
            "status_socket": str(folder / "status.sock"),
            "metrics": {"enabled": False},
            "gpus": False,
            "health": {"poll_interval_s": POLL_S},
            "bare_metal": {
                "cluster": CLUSTER,
                "etcd": {"endpoints": self.etcd.endpoints, "timeout_s": 2, "insecure_lab": True},
                "hosts": self.hosts,
                "spares": self.spares,
                # Said explicitly, or the job would be refused: the lab's interpreter is reachable by root only.
                "trainer_users": {USER: "root"},
                "root_trainers": True,
                "lease_ttl_s": self.ttl_s,
                "fence_margin_s": self.margin_s,
            },
        }
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "node.yaml").write_text(yaml.safe_dump(node, sort_keys=False))
        argv = [sys.executable, "-m", "lamplighter", "supervise", "--config", str(folder / "node.yaml")]
        self.procs[host] = psutil.Process(
            self.lab.start(host, argv, {"PYTHONUNBUFFERED": "1"}, folder / "daemon.log").pid
        )

    def daemons(self) -> dict[str, psutil.Process]:
        """Each host's daemon process (the unshare's descendant running `supervise`)."""
        out = {}
        for host, top in self.procs.items():
            try:
                for p in top.children(recursive=True):
                    if "supervise" in p.cmdline():
                        out[host] = p
            except psutil.Error:
                continue
        return out

    def check_alive(self) -> None:
        for host, p in self.procs.items():
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                log = self.folder / "hosts" / host / "daemon.log"
                tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
                raise RuntimeError(f"host {host}'s daemon exited: {' / '.join(tail)}")

    def submit(self, groups: int) -> None:
        job = JobConfig.model_validate(
            {
                "name": JOB,
                "run_dir": str(self.run_dir),
                "groups": {"count": groups},
                "lighthouse": {"host": self.lab.gateway, "port": 29510},
                "trainer": {"command": SLEEPER},
            }
        )
        self.etcd.admin_store().put(self.keys.spec(USER, JOB), job.model_dump_json())


def cpu_s(procs: dict[str, psutil.Process]) -> dict[str, float]:
    out = {}
    for host, p in procs.items():
        try:
            t = p.cpu_times()
            out[host] = float(t.user + t.system)
        except psutil.Error:
            continue
    return out


def measure(folder: Path, n: int, window_s: float, ttl_s: int, margin_s: float) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    names = [f"h{i}" for i in range(n - 1)] + ["s0"]
    with HostLab(names) as lab, EtcdCluster(folder / "etcd", host=lab.gateway) as etcd:
        fleet = HostFleet(lab, etcd, folder, ttl_s, margin_s)
        for host in names:
            fleet.boot(host)
        admin = etcd.admin_store()

        def leased() -> bool:
            fleet.check_alive()
            return all(admin.get(fleet.keys.host(h)) is not None for h in names)

        wait_until(leased, 180, f"{n} host daemons to hold their leases")
        fleet.submit(n - 1)

        def all_running() -> bool:
            fleet.check_alive()
            return len(trainers(fleet.run_dir)) == n - 1

        wait_until(all_running, 180, f"{n - 1} groups to run")
        time.sleep(ttl_s)  # settle: every host past its first renewal interval
        daemons = fleet.daemons()
        cpu0, r0, t0 = cpu_s(daemons), etcd.requests_served(), time.monotonic()
        time.sleep(window_s)  # the counting window
        span = time.monotonic() - t0
        steady = (etcd.requests_served() - r0) / span / n
        cpu1 = cpu_s(daemons)
        cpu = sorted((cpu1[h] - cpu0[h]) / span for h in cpu1 if h in cpu0)
        rss = [p.memory_info().rss / 1e6 for p in daemons.values() if p.is_running()]
        # One host dies: every process of its namespace at once; the spare takes its group.
        before = trainers(fleet.run_dir)
        r0, t0 = etcd.requests_served(), time.monotonic()
        lab.crash("h0")
        fleet.procs.pop("h0")
        wait_until(lambda: trainers(fleet.run_dir).get(0) not in (None, before.get(0)), 60, "group 0 on the spare")
        moved_s = time.monotonic() - t0
        during = (etcd.requests_served() - r0) / moved_s / (n - 1)
        placed = admin.get(fleet.keys.group(JOB, 0))
        return {
            "hosts": n,
            "host_network": "a namespace per host",
            "window_s": round(span, 1),
            "cycle_s": POLL_S,
            "lease_ttl_s": ttl_s,
            "fence_margin_s": margin_s,
            "etcd_req_per_host_s": round(steady, 3),
            "etcd_req_per_host_s_during_move": round(during, 3),
            "host_death_to_group_on_spare_s": round(moved_s, 2),
            "group_0_placed_on": None if placed is None else json.loads(placed.value).get("host"),
            "host_daemon_cpu_cores_median": round(cpu[len(cpu) // 2], 4) if cpu else None,
            "host_daemon_rss_mb_max": round(max(rss), 1) if rss else None,
        }


def main(argv: list[str] | None = None) -> int:
    ttl, margin = _defaults()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="4,16,64", help="host counts (each: N-1 hosts and one spare)")
    ap.add_argument("--window-s", type=float, default=20.0, help="steady-state window per size")
    ap.add_argument("--ttl-s", type=int, default=ttl, help=f"lease_ttl_s (default: the config's, {ttl})")
    ap.add_argument("--margin-s", type=float, default=margin, help=f"fence_margin_s (default {margin:g})")
    ap.add_argument("--dir", type=Path, default=Path("build/etcd-scale"))
    ap.add_argument("--out", type=Path, default=RESULTS / "etcd_scale.json")
    args = ap.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.hosts.split(",")]:
        row = measure(args.dir / f"hosts-{n}", n, args.window_s, args.ttl_s, args.margin_s)
        rows.append(row)
        print(
            f"{n:3d} hosts: {row['etcd_req_per_host_s']:.3f} etcd requests/s per host at steady state "
            f"(goal <= {GOAL}), {row['etcd_req_per_host_s_during_move']:.3f} while a dead host's group moved "
            f"({row['host_death_to_group_on_spare_s']:.1f} s to run on the spare); host daemon "
            f"{row['host_daemon_cpu_cores_median']} cores, {row['host_daemon_rss_mb_max']} MB",
            flush=True,
        )
    out = {"name": args.out.stem, "environment": environment(), "goal_req_per_host_s": GOAL, "hosts": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
