"""`make demo-bare`: a bare-metal cluster without Slurm on this machine, with one fault of each kind.

Four hosts and one spare (lab/bare_hosts.py: each in its own network, PID,
mount and UTS namespace, with its own address on a bridge), a 3-member etcd
with TLS client certificates and its auth on (each host its own etcd user and
role, the job's submitter another: bare/etcd_roles.py) and a Lighthouse on the
bridge's gateway, a host daemon on every host (`lamplighter supervise`, role
bare-metal, its own simulated GPUs), and a 3-group job submitted with
`lamplighter submit` by etcd user `demo`. Its trainers run as root, without
capabilities, because the host configs say so (`trainer_users: {demo: root}`,
`root_trainers: true`): the lab's interpreter lives under /root, which no
other account reaches (tests/security runs bare-metal trainers as a real
second user). Then, one at a time, each after its group commits again:

  kill        SIGKILL of a trainer: its host restarts it
  hang        SIGSTOP of a trainer: its host's hang check kills and restarts it
  gpu         an uncorrectable ECC error on a host's GPU: the host is taken out, the group moves
  host-crash  every process of the placer's host dies at once: the group moves, another daemon
              becomes the placer; the host then boots again and rejoins
  partition   a host's link is cut: it kills its trainers before its lease runs out, the group
              moves; the link comes back afterwards

The job trains until every fault has been recovered, then stops a few
seconds later (its stop-at file), or at --steps. Writes report.json (faults,
reached_target, steps_lost, weights_identical, what each host did) and
timeline.png under --dir, prints per-fault numbers and tears everything down
(only what it started). Needs root (network namespaces).

    python -m lamplighter.lab.demo_bare [--dir build/demo-bare] [--steps N] [--step-sleep S] [--kinds kill,hang]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import yaml

from lamplighter.bare import etcd_roles
from lamplighter.bare.etcd_store import Store
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.configs.schema import JobConfig
from lamplighter.gpusim.build import ensure_built, sim_env
from lamplighter.gpusim.inject import inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.bare_hosts import HostLab
from lamplighter.lab.bare_report import build_bare_report, per_fault_lines
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.run_end import stop_run
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.lab.testcluster import ClusterError, wait_until
from lamplighter.lighthouse.spawn import Lighthouse
from lamplighter.rundir.actions import ACTIONS_FILE
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.rundir.stop_at import final_target, read_stop_at
from lamplighter.slurm.chaos.inject import read_records
from lamplighter.system.ports import free_port

KINDS = ("kill", "hang", "gpu", "host-crash", "partition")
HOSTS = ["h1", "h2", "h3", "h4"]
SPARES = ["s1"]
CLUSTER = "demo"
JOB = "bare-demo"
SUBMITTER = "demo"  # the etcd user who submits the job
POLL_S = 0.5
LEASE_TTL_S = 4
FENCE_MARGIN_S = 2.0
HANG_TIMEOUT_S = 5.0
FAR_STEPS = 10_000_000  # trainer.steps without --steps: the demo stops the job (stop-at) once its faults are done


class BareDemo:
    def __init__(self, root: Path, steps: int, step_sleep_s: float = 0.0) -> None:
        self.root = root
        self.steps = steps
        self.step_sleep_s = step_sleep_s
        self.lab = HostLab(HOSTS + SPARES)
        self.etcd: EtcdCluster | None = None
        self.lighthouse: Lighthouse | None = None
        self.keys = Keys(CLUSTER)
        self.run_dir = root / "run"
        self.admin: Store | None = None
        self.gpu_root = ensure_built().parent.parent
        self.job_yaml = root / "job.yaml"
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.etcd_users: dict[str, dict[str, str]] = {}  # etcd user -> its config (certificate, password)

    # -- bring-up ---------------------------------------------------------------------------------------------
    def up(self) -> None:
        self.lab.up()
        self.etcd = EtcdCluster(self.root / "etcd", size=3, tls=True, auth=True, host=self.lab.gateway).up()
        self.admin = self.etcd.admin_store(timeout_s=2.0)
        port = free_port(self.lab.gateway)
        job = self._job(port)
        # As a head host runs it under systemd: torchft's Lighthouse with its memory (a restart stands in
        # for the replicas alive before).
        self.lighthouse = Lighthouse(
            job.lighthouse, self.root / "lighthouse.log", remember=self.root / "lighthouse-memory.json"
        )
        self.lighthouse.start(time.time())
        self.lighthouse.wait_ready(30)
        # The first host boots first and so becomes the placer; it also gets group 0 (the first host in the
        # order): the host crash then hits a placer that runs a group, every time.
        self.boot(HOSTS[0])
        wait_until(self.booted(lambda: self.placer() == HOSTS[0]), 60, f"{HOSTS[0]} becomes the placer")
        for host in HOSTS[1:] + SPARES:
            self.boot(host)
        wait_until(self.booted(self._all_alive), 60, "every host daemon holds its lease in etcd")

    def _etcd_user(self, name: str, role: etcd_roles.Role) -> dict[str, str]:
        """An etcd user with its role, certificate and password file (made once: a host boots again after a
        crash with the same)."""
        if name not in self.etcd_users:
            assert self.etcd is not None
            t = self.etcd.client_tls(name)
            creds = self.etcd.add_user(name, role)
            password = self.root / "etcd" / f"{name}.password"
            password.write_text(creds.password + "\n")
            password.chmod(0o600)
            self.etcd_users[name] = {
                "ca_file": t.ca,
                "cert_file": t.cert,
                "key_file": t.key,
                "user": name,
                "password_file": str(password),
            }
        return self.etcd_users[name]

    def _job(self, port: int) -> JobConfig:
        doc = {
            "name": JOB,
            "run_dir": str(self.run_dir),
            "placement": "bare-metal",
            "bare_metal": {
                "cluster": CLUSTER,
                "etcd": {
                    "endpoints": self._endpoints(),
                    **self._etcd_user(SUBMITTER, etcd_roles.submitter_role(self.keys, SUBMITTER)),
                },
            },
            "trainer": {
                "steps": self.steps,
                "model": {
                    "dim": 128,
                    "layers": 2,
                    "heads": 4,
                    "seq_len": 64,
                    "batch_size": 16,
                    "step_sleep_s": self.step_sleep_s,
                },
                "checkpoint": {"interval_s": 20},
            },
            "groups": {"count": 3},
            "lighthouse": {
                "host": self.lab.gateway,
                "port": port,
                "min_replicas": 1,
                "quorum_tick_ms": 20,
                "join_timeout_ms": 1000,
                "heartbeat_timeout_ms": 500,
            },
            "torchft": {"pg_timeout_s": 2, "timeout_s": 3, "quorum_timeout_s": 4, "connect_timeout_s": 10},
            "health": {"hang_timeout_s": HANG_TIMEOUT_S, "poll_interval_s": POLL_S},
            "restart": {"budget_per_group": 5, "backoff_initial_s": 0},
        }
        self.job_yaml.write_text(yaml.safe_dump(doc, sort_keys=False))
        return JobConfig.model_validate(doc)

    def _endpoints(self) -> list[str]:
        assert self.etcd is not None
        return self.etcd.endpoints

    def gpus(self, host: str) -> StateDir:
        return StateDir(self.root / "hosts" / host / "gpus")

    def boot(self, host: str) -> None:
        """Start the host's daemon as its systemd unit would, inside the host (a reboot after a crash, too)."""
        folder = self.root / "hosts" / host
        gpus = self.gpus(host)
        if not gpus.root.exists():
            gpus.init(2)
        node = {
            "role": "bare-metal",
            "node_name": host,
            "state_dir": str(folder / "state"),
            "gpus": True,
            "health": {"poll_interval_s": POLL_S, "probe_deadline_s": 2},
            "bare_metal": {
                "cluster": CLUSTER,
                "etcd": {
                    "endpoints": self._endpoints(),
                    "timeout_s": 1,
                    **self._etcd_user(host, etcd_roles.host_role(self.keys, host)),
                },
                "hosts": HOSTS,
                "spares": SPARES,
                # Said explicitly, or the job would be refused: the lab's interpreter is reachable by root only.
                "trainer_users": {SUBMITTER: "root"},
                "root_trainers": True,
                "lease_ttl_s": LEASE_TTL_S,
                "fence_margin_s": FENCE_MARGIN_S,
            },
        }
        (folder / "node.yaml").write_text(yaml.safe_dump(node, sort_keys=False))
        env = {**sim_env(self.gpu_root, gpus.root), "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "lamplighter", "supervise", "--config", str(folder / "node.yaml")]
        self.daemons[host] = self.lab.start(host, argv, env, folder / "daemon.log")

    def booted(self, cond: Callable[[], bool]) -> Callable[[], bool]:
        """`cond`, failing at once when a booted daemon has exited (a bad node.yaml, say), not at the timeout."""

        def check() -> bool:
            for host, proc in self.daemons.items():
                if proc.poll() is not None:
                    log = self.root / "hosts" / host / "daemon.log"
                    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
                    raise ClusterError(f"host {host}'s daemon exited {proc.returncode}: {' / '.join(tail)}")
            return cond()

        return check

    def _all_alive(self) -> bool:
        assert self.admin is not None
        return all(self.admin.get(self.keys.host(h)) is not None for h in HOSTS + SPARES)

    # -- what runs where ----------------------------------------------------------------------------------------
    def assignment(self, group: int) -> Assignment | None:
        assert self.admin is not None
        e = self.admin.get(self.keys.group(JOB, group))
        return Assignment.from_json(e.value) if e else None

    def placer(self) -> str | None:
        assert self.admin is not None
        e = self.admin.get(self.keys.placer)
        return e.value if e else None

    def trainer_pid(self, group: int, epoch: int) -> int | None:
        """The trainer of (group, epoch) as this machine's root PID namespace sees it."""
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if len(cmd) < 3 or cmd[1:3] != ["-m", "lamplighter.trainer"]:
                continue
            try:
                env = p.environ()
            except psutil.Error:
                continue
            want = {"LAMPLIGHTER_RUN_DIR": str(self.run_dir), "LAMPLIGHTER_REPLICA_ID": str(group)}
            if all(env.get(k) == v for k, v in want.items()) and env.get("LAMPLIGHTER_ATTEMPT") == str(epoch):
                return p.pid
        return None

    def committed(self, group: int) -> list[Any]:
        return [r for r in read_steps(RunPaths(self.run_dir).steps(group)) if r.committed]

    def started_after(self, group: int, t: float) -> float | None:
        """When a host started the group's trainer after t, from the hosts' action lines."""
        starts = [
            r["ts"]
            for r in read_records(self.run_dir / ACTIONS_FILE)
            if r.get("action") == "start" and r.get("group") == group and r.get("ts", 0) > t
        ]
        return min(starts, default=None)

    def commits_after(self, group: int, t: float) -> bool:
        return any(r.t > t for r in self.committed(group))

    # -- faults ---------------------------------------------------------------------------------------------------
    def fault(self, kind: str, group: int) -> dict[str, Any]:
        a = self.assignment(group)
        assert a is not None and a.host is not None, f"group {group} is not placed"
        host = a.host
        rec: dict[str, Any] = {"kind": kind, "group": group, "host": host, "epoch": a.epoch}
        if kind in ("kill", "hang"):
            pid = wait_until(lambda: self.trainer_pid(group, a.epoch), 30, f"group {group}'s trainer")
            rec["t"] = time.time()
            os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        elif kind == "gpu":
            rec["t"] = time.time()
            rec["gpu"] = inject(self.gpus(host), 0, "ecc-uncorrectable")
        elif kind == "host-crash":
            rec["placer_before"] = self.placer()
            rec["t"] = time.time()
            self.lab.crash(host)
            rec["placer_after"] = wait_until(
                lambda: (p := self.placer()) not in (None, host) and p, 3 * LEASE_TTL_S, "another host takes the placer"
            )
            rec["t_placer_moved"] = time.time()
        elif kind == "partition":
            rec["t"] = time.time()
            self.lab.cut(host)
        else:
            raise ValueError(f"unknown kind {kind!r}")
        t0 = rec["t"]
        # Back: the first commit of the group's next trainer (restarted in place or started elsewhere).
        t_start = wait_until(lambda: self.started_after(group, t0), 120, f"group {group} started again after {kind}")
        wait_until(lambda: self.commits_after(group, t_start), 120, f"group {group} commits again after {kind}")
        rec["t_first_commit"] = min(r.t for r in self.committed(group) if r.t > t_start)
        after = self.assignment(group)
        rec["host_after"], rec["epoch_after"] = (after.host, after.epoch) if after else (None, None)
        if kind == "host-crash":
            self.boot(host)  # the power comes back
            wait_until(self._all_alive, 60, f"{host} rejoins")
        if kind == "partition":
            self.lab.mend(host)
            wait_until(self._all_alive, 60, f"{host} rejoins after its link is mended")
        return rec

    def target_for(self, kind: str, used: set[str]) -> int:
        """The group a fault hits: for a host crash, the one on the placer's host (the placer's death is measured
        too); otherwise a group on a host no earlier fault took out, turn by turn."""
        placed = {g: a.host for g in range(3) if (a := self.assignment(g)) and a.host}
        if kind == "host-crash":
            p = self.placer()
            for g, h in placed.items():
                if h == p:
                    return g
        order = sorted(placed, key=lambda g: (placed[g] in used, g))
        return order[0]

    # -- end ----------------------------------------------------------------------------------------------------
    def wait_end(self, timeout_s: float) -> int:
        """Wait until the job reaches its target (trainer.steps, or its stop-at step); return that target."""
        target = final_target(self.steps, read_stop_at(self.run_dir))
        wait_until(
            lambda: max((r.step for g in range(3) for r in self.committed(g)), default=0) >= target,
            timeout_s,
            f"the job reaches step {target}",
        )
        return target

    def etcd_requests(self) -> float:
        assert self.etcd is not None
        return self.etcd.requests_served()

    def down(self) -> None:
        if self.etcd is not None and self.admin is not None:
            subprocess.run(
                [sys.executable, "-m", "lamplighter", "cancel", str(self.job_yaml)],
                capture_output=True,
                timeout=60,
                check=False,
            )
        self.lab.down()
        if self.lighthouse is not None:
            self.lighthouse.kill()
        if self.etcd is not None:
            self.etcd.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.demo_bare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dir", type=Path, default=Path("build/demo-bare"), help="demo folder (wiped first)")
    ap.add_argument(
        "--steps", type=int, default=None, help="target steps (default: train until every fault has been recovered)"
    )
    ap.add_argument(
        "--step-sleep", type=float, default=0.0, help="trainer.model.step_sleep_s: pace the steps (default 0)"
    )
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds, in order (known: {', '.join(KINDS)})")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        print(f"demo-bare: unknown kinds {bad} (known: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("demo-bare: needs root (it creates network namespaces, a bridge and veth pairs)", file=sys.stderr)
        return 2
    missing = [t for t in ("ip", "unshare", "setpriv", "etcd", "openssl") if shutil.which(t) is None]
    if missing:
        print(f"demo-bare: missing {', '.join(missing)} (make install installs them)", file=sys.stderr)
        return 2
    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    demo = BareDemo(root, args.steps or FAR_STEPS, args.step_sleep)
    print(f"starting 4 hosts + 1 spare, etcd (3 members, TLS) and the Lighthouse under {root} ...", flush=True)
    try:
        demo.up()
        r0, t_up = demo.etcd_requests(), time.time()
        assert demo.admin is not None
        admin_before = demo.admin.requests_made
        out = subprocess.run(
            [sys.executable, "-m", "lamplighter", "submit", str(demo.job_yaml)], capture_output=True, text=True
        )
        print(out.stdout.strip() or out.stderr.strip(), flush=True)
        if out.returncode != 0:
            return 1
        t_submitted = time.time()
        wait_until(lambda: all(len(demo.committed(g)) >= 30 for g in range(3)), 180, "30 steps from every group")
        records: list[dict[str, Any]] = []
        used: set[str] = set()
        for kind in kinds:
            group = demo.target_for(kind, used)
            rec = demo.fault(kind, group)
            used.add(rec["host"])
            records.append(rec)
            shown = {k: rec.get(k) for k in ("kind", "group", "host", "host_after", "epoch_after")}
            print(json.dumps({**shown, "back_to_commit_s": round(rec["t_first_commit"] - rec["t"], 2)}), flush=True)
        if args.steps is None:
            stop_run(demo.run_dir, range(3))  # every fault recovered: stop a few steps on
        target = demo.wait_end(900)
        t_end = time.time()
        admin_used = demo.admin.requests_made - admin_before
        load = {
            "window_s": round(t_end - t_up, 1),
            "hosts": len(HOSTS + SPARES),
            "poll_interval_s": POLL_S,
            # etcd's own count, less this harness's reads; the trainers never talk to etcd.
            "requests_per_s_per_host": round(
                (demo.etcd_requests() - r0 - admin_used) / (t_end - t_up) / len(HOSTS + SPARES), 2
            ),
        }
        report = build_bare_report(
            demo.run_dir,
            records,
            target_steps=target,
            t_start=t_submitted,
            t_end=t_end,
            out_dir=root,
            extra={
                "etcd_load": load,
                "lease_ttl_s": LEASE_TTL_S,
                "fence_margin_s": FENCE_MARGIN_S,
                "hang_timeout_s": HANG_TIMEOUT_S,
                "source": source_stamp(),
            },
        )
        print("\n".join(per_fault_lines(report)))
        fenced = report["checks"]["partition_fenced"] if "partition" in kinds else None
        ok = report["ok"]
        print(
            f"{'OK' if ok else 'FAILED'}: steps {report['steps_committed']}/{report['target_steps']}, lost "
            f"{report['steps_lost']}, weights identical {report['weights_identical']}, partitioned host fenced "
            f"{fenced}, etcd {load['requests_per_s_per_host']} requests/s per host"
        )
        print(
            f"report: {root / 'report.json'}   timeline: {report.get('timeline')}   actions: {demo.run_dir / ACTIONS_FILE}"
        )
        return 0 if ok else 1
    finally:
        demo.down()


if __name__ == "__main__":
    sys.exit(main())
