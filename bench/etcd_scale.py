"""etcd requests each bare-metal host daemon makes, against the host count (#31 item 2 and 3, bare metal).

N real host daemons (bare/host_daemon.py, the code `lamplighter supervise` runs
for role bare-metal) against one real etcd, with one job of N-1 groups whose
trainers are sleeping processes, and one spare. The daemons share this process
and are cycled in turn every `--cycle-s` (the node config's poll interval), as
the host lab's tests cycle them: on this 2-core machine N Python daemons would
otherwise measure the CPU, not etcd's load. Each host has its own Store, whose
`requests_made` counts every HTTP request it sends (a watch stream counts once).

Per size: the steady-state requests a second per host over `--window-s`, the
same while one host dies (its daemon stops and its trainer goes; the spare
takes its group after the lease), and the time from the death to the group
running on the spare. The lease is the default (8 s, margin 2 s: a renewal
every 3 s) unless --ttl-s is given.

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

from bench.results_io import RESULTS, environment
from lamplighter.bare.etcd_store import Store
from lamplighter.bare.keys import Keys
from lamplighter.bare.placer import HostEntry
from lamplighter.configs.bare_metal import BareMetalNodeConfig
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.host_daemons import lab_host_daemon

SLEEPER = [sys.executable, "-c", "import time; time.sleep(3600)"]
USER = "bench"  # the etcd user the job is submitted as (etcd auth off: the lab's insecure mode)
GOAL = 0.5  # #31: at most 0.5 etcd requests a second per host at steady state


def _defaults() -> tuple[int, float]:
    f = BareMetalNodeConfig.model_fields
    return int(f["lease_ttl_s"].default), float(f["fence_margin_s"].default)


class Cluster:
    def __init__(self, etcd: EtcdCluster, folder: Path, n: int, ttl_s: int, margin_s: float) -> None:
        self.keys = Keys("scale")
        self.hosts = [HostEntry(f"h{i}") for i in range(n - 1)] + [HostEntry("s0", spare=True)]
        self.daemons = {
            h.name: lab_host_daemon(
                Store(etcd.endpoints, timeout_s=2.0),
                self.keys,
                h.name,
                self.hosts,
                folder / h.name,
                etcd_user=USER,
                ttl_s=ttl_s,
                margin_s=margin_s,
            )
            for h in self.hosts
        }
        self.admin = Store(etcd.endpoints)
        self.job = JobConfig.model_validate(
            {
                "name": "scale",
                "run_dir": str(folder / "run"),
                "groups": {"count": n - 1},
                "lighthouse": {"port": 29510},
                "trainer": {"command": SLEEPER},
            }
        )

    def requests(self) -> int:
        return sum(d.store.requests_made for d in self.daemons.values())

    def cycle(self, cycle_s: float) -> None:
        t = time.monotonic()
        for d in self.daemons.values():
            d.cycle()
        time.sleep(max(0.0, cycle_s - (time.monotonic() - t)))  # a daemon's poll: its own pace, not a sync

    def runs(self, host: str, group: int) -> bool:
        have = self.daemons[host].running.get(("scale", group))
        return have is not None and have[1].running()

    def close(self) -> None:
        for d in self.daemons.values():
            d.stop()


def measure(folder: Path, n: int, window_s: float, cycle_s: float, ttl_s: int, margin_s: float) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with EtcdCluster(folder / "etcd") as etcd:
        c = Cluster(etcd, folder, n, ttl_s, margin_s)
        try:
            for d in c.daemons.values():
                d.cycle()
            c.admin.put(c.keys.spec(USER, "scale"), c.job.model_dump_json())
            deadline = time.monotonic() + 120
            while not all(c.runs(f"h{g}", g) for g in range(n - 1)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{n} hosts: not every group ran within 120 s")
                c.cycle(cycle_s)
            for _ in range(int(ttl_s / cycle_s)):  # settle: every host past its first renewal interval
                c.cycle(cycle_s)
            r0, t0 = c.requests(), time.monotonic()
            while time.monotonic() - t0 < window_s:
                c.cycle(cycle_s)
            steady = (c.requests() - r0) / (time.monotonic() - t0) / n
            # One host dies: its daemon stops cycling and its trainer goes; the spare takes its group.
            dead = c.daemons.pop("h0")
            for _, gp in dead.running.values():
                gp.kill()
            r0, t0 = c.requests(), time.monotonic()
            while not c.runs("s0", 0):
                if time.monotonic() - t0 > 60:
                    raise RuntimeError(f"{n} hosts: the spare did not take group 0 within 60 s")
                c.cycle(cycle_s)
            moved_s = time.monotonic() - t0
            during = (c.requests() - r0) / moved_s / (n - 1)
            c.daemons["h0"] = dead  # stopped with the rest
            return {
                "hosts": n,
                "window_s": window_s,
                "cycle_s": cycle_s,
                "lease_ttl_s": ttl_s,
                "fence_margin_s": margin_s,
                "etcd_req_per_host_s": round(steady, 3),
                "etcd_req_per_host_s_during_move": round(during, 3),
                "host_death_to_group_on_spare_s": round(moved_s, 2),
            }
        finally:
            c.close()


def main(argv: list[str] | None = None) -> int:
    ttl, margin = _defaults()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="4,16,64", help="host counts (each: N-1 hosts and one spare)")
    ap.add_argument("--window-s", type=float, default=20.0, help="steady-state window per size")
    ap.add_argument("--cycle-s", type=float, default=0.5, help="each daemon's poll interval")
    ap.add_argument("--ttl-s", type=int, default=ttl, help=f"lease_ttl_s (default: the config's, {ttl})")
    ap.add_argument("--margin-s", type=float, default=margin, help=f"fence_margin_s (default {margin:g})")
    ap.add_argument("--dir", type=Path, default=Path("build/etcd-scale"))
    ap.add_argument("--out", type=Path, default=RESULTS / "etcd_scale.json")
    args = ap.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.hosts.split(",")]:
        row = measure(args.dir / f"hosts-{n}", n, args.window_s, args.cycle_s, args.ttl_s, args.margin_s)
        rows.append(row)
        print(
            f"{n:3d} hosts: {row['etcd_req_per_host_s']:.3f} etcd requests/s per host at steady state "
            f"(goal <= {GOAL}), {row['etcd_req_per_host_s_during_move']:.3f} while a dead host's group moved "
            f"({row['host_death_to_group_on_spare_s']:.1f} s to run on the spare)",
            flush=True,
        )
    out = {"name": args.out.stem, "environment": environment(), "goal_req_per_host_s": GOAL, "hosts": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
