"""`lamplighter supervise --config node.yaml`: the per-node daemon (compute or head role).

Start-up: load the persisted state (exclusive per state dir), finish the
actions a killed predecessor left pending (executor.recover), serve metrics
and the status socket, then cycle every health.poll_interval_s. systemd
hears READY=1 after the first full cycle and WATCHDOG=1 every cycle.
SIGTERM/SIGINT: STOPPING=1, close everything; trainers are left running
(the next daemon re-adopts them).

Environment read here and nowhere else:
    NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID   systemd (sd_notify.py)
    ROCM_PATH / LD_LIBRARY_PATH / LAMPLIGHTER_GPUSIM_DIR   passed on to the GPU probe workers
Not read: LAMPLIGHTER_SET (a root daemon takes its settings from its node.yaml
and its command line, --set, only). Tests stop the executor before an action
with --test-pause-before KIND --test-pause-file PATH (executor.py): flags on
the command line that systemd runs, never the environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from lamplighter.commands.supervise_bare import bare_host
from lamplighter.commands.validate import add_override_args, report_invalid
from lamplighter.configs.loader import ConfigError, load_node
from lamplighter.configs.schema import NodeConfig
from lamplighter.rundir.actions import ACTIONS_FILE, ActionLog, FileSink, logging_sink
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.parsers import parse_show_config
from lamplighter.slurm.requeue import ScontrolJobUpdate
from lamplighter.slurm.run import SlurmCli, SlurmError
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.loop import HeadLoop
from lamplighter.supervisor.health_report import HealthPublisher, summarize
from lamplighter.supervisor.job_table import PRIVATE_MODE, table_mode
from lamplighter.supervisor.last_status import LastStatus
from lamplighter.supervisor.metrics import DaemonMetrics, MetricsServer, start_metrics_server
from lamplighter.supervisor.node.adoption import JobsSeen
from lamplighter.supervisor.node.loop import ComputeLoop, compute_executor_parts
from lamplighter.supervisor.node.recovery_watch import RecoveryWatch
from lamplighter.supervisor.sd_notify import Notifier, watchdog_interval
from lamplighter.supervisor.state_store import DaemonState, StateError
from lamplighter.supervisor.status_socket import StatusServer
from lamplighter.supervisor.user_reads.pool import UserReads
from lamplighter.supervisor.user_reads.zygote import ZygoteError

log = logging.getLogger("lamplighter.supervise")

# Where the command line's test flags travel to build_executor (set from --test-pause-*, never inherited).
ENV_PAUSE_BEFORE = "LAMPLIGHTER_TEST_PAUSE_BEFORE"
ENV_PAUSE_FILE = "LAMPLIGHTER_TEST_PAUSE_FILE"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "supervise",
        help="run the per-node supervisor daemon (systemd service)",
        description="Watch this node's GPUs and lamplighter trainers (role compute), or the compute nodes "
        "(role head: a silent slurmd), and act through Slurm: kill, drain, requeue, mark down.",
    )
    p.add_argument("--config", required=True, help="node config YAML (e.g. /etc/lamplighter/node.yaml)")
    add_override_args(p)
    p.add_argument("--once", action="store_true", help="run one cycle, print the status as JSON, exit")
    # Tests only: stop for good before carrying out the first action of this kind (executor.py).
    p.add_argument("--test-pause-before", default=None, help=argparse.SUPPRESS)
    p.add_argument("--test-pause-file", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    try:
        cfg = load_node(args.config, args.overrides)  # no LAMPLIGHTER_SET from the environment: a root daemon's
    except ConfigError as e:
        return report_invalid(e)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    env = dict(os.environ)
    if args.test_pause_before:
        env[ENV_PAUSE_BEFORE] = args.test_pause_before
        env[ENV_PAUSE_FILE] = args.test_pause_file or ""
    else:
        env.pop(ENV_PAUSE_BEFORE, None)
        env.pop(ENV_PAUSE_FILE, None)
    try:
        return run_daemon(cfg, env, once=args.once)
    except StateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ZygoteError as e:
        log.error("%s; ending, so that systemd starts a fresh daemon (trainers keep running)", e)
        return 1


def _gpu_check(cfg: NodeConfig, env: Mapping[str, str], state: DaemonState) -> Any:
    from lamplighter.supervisor import gpu_baselines
    from lamplighter.supervisor.gpu.check import GpuCheck
    from lamplighter.supervisor.gpu.worker import WorkerSpec

    # Baselines from before a restart: errors that grew while the daemon was down still count.
    return GpuCheck(
        cfg.health,
        WorkerSpec(env=dict(env)),
        baselines=gpu_baselines.restore(state),
        on_baseline=gpu_baselines.persister(state),
    )


@dataclass
class _Stop:
    event: threading.Event
    wake: threading.Event | None = None  # the loop's wait, when it waits on more than the stop

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping (trainers are left running)", signum)
        self.event.set()
        if self.wake is not None:
            self.wake.set()


def run_daemon(cfg: NodeConfig, env: Mapping[str, str], once: bool = False) -> int:
    """Recover, build the role's loop, serve metrics and status, cycle until stopped; trainers are left running."""
    if cfg.role == "bare-metal":
        return run_bare_metal(cfg, env, once)
    node = cfg.node_name or socket.gethostname().split(".")[0]
    # First, while this process has one thread: what users control is parsed in helpers forked from here.
    reads = UserReads.start() if cfg.role == "compute" else None
    state_dir = Path(cfg.state_dir)
    state = DaemonState.load(state_dir)
    sink = FileSink(state_dir / ACTIONS_FILE)
    metrics = DaemonMetrics()
    metrics.set_mode(cfg.mode)
    api = SlurmActions(SlurmCli(slurm_conf=cfg.slurm_conf))
    # A compute node's executor copies action lines into each job's run directory: the jobs the loop sees.
    seen, run_dir_writer = compute_executor_parts() if reads is None else compute_executor_parts(reads.settings)
    job_log = run_dir_writer if cfg.role == "compute" else None
    executor = build_executor(
        env,
        node,
        state,
        api,
        sink,
        metrics,
        job_log,
        observe=cfg.mode == "observe",
        drain_budget=cfg.max_drain_fraction,
    )
    if cfg.mode == "observe":
        log.warning("mode observe: every action is decided and logged as 'would ...', none is taken")
    notifier = Notifier.from_env(env, strict=False)
    stop = threading.Event()
    wake = threading.Event()  # set by a stop and by a trainer's exit
    if not once:
        signal.signal(signal.SIGTERM, _Stop(stop, wake))
        signal.signal(signal.SIGINT, _Stop(stop, wake))
    loop: ComputeLoop | HeadLoop | None = None
    metrics_server: MetricsServer | None = None
    status: StatusServer | None = None
    try:
        recover_pending(executor)
        if cfg.role == "compute":
            why = check_proctrack(slurm_config(api))
            metrics.proctrack_cgroup.set(1 if why is None else 0)
            if why is not None:
                log.error("%s", why)
        role_loop, recovery = build_loop(cfg, node, api, executor, seen, env, state, metrics, wake.set, reads)
        loop = role_loop  # set before the head loop starts: a failed start still closes it
        if isinstance(role_loop, HeadLoop):
            role_loop.start(time.time())
        if cfg.metrics.enabled and not once:
            metrics_server = start_metrics_server(metrics.registry, cfg.metrics.host, cfg.metrics.port)
        last = LastStatus(role_loop.status)
        document = status_document(node, state, last, metrics_server)
        if not once:
            status = StatusServer(Path(cfg.status_socket), document).start()
        publisher = HealthPublisher(Path(cfg.cluster_status_dir), node) if cfg.cluster_status_dir else None
        warn_if_watchdog_short(env, cfg.health.poll_interval_s)

        def ready() -> None:
            # After the first cycle: what systemd is told ran before is already adopted (`systemctl status`).
            what = f"{cfg.role} supervisor for {node}"
            if isinstance(role_loop, ComputeLoop):
                what += f", {len(role_loop.trainers)} processes of lamplighter jobs adopted"
            notifier.ready(status=what)
            log.info("ready: %s (state %s)", what, state_dir)

        def one_cycle() -> None:
            if reads is not None:
                reads.check()
            cycle(node, role_loop, last, recovery, publisher)

        run_cycles(
            one_cycle,
            cfg.health.poll_interval_s,
            stop,
            ready,
            notifier.watchdog,
            document if once else None,
            wake,
            role_loop.next_cycle_in if isinstance(role_loop, ComputeLoop) else None,
        )
        notifier.stopping(status="stopping; trainers left running")
    finally:
        if status is not None:
            status.close()
        if metrics_server is not None:
            metrics_server.close()
        if loop is not None:
            loop.close()
        if reads is not None:
            reads.close()
        state.save()
        state.close()
        sink.close()
    return 0


def run_bare_metal(cfg: NodeConfig, env: Mapping[str, str], once: bool = False) -> int:
    """role bare-metal: a host of a cluster without Slurm (bare/host_daemon.py), cycling until stopped."""
    host = bare_host(cfg, cfg.node_name or socket.gethostname().split(".")[0], time.monotonic, env)
    notifier = Notifier.from_env(env, strict=False)
    stop = threading.Event()
    if not once:
        signal.signal(signal.SIGTERM, _Stop(stop))
        signal.signal(signal.SIGINT, _Stop(stop))
    warn_if_watchdog_short(env, cfg.health.poll_interval_s)

    def ready() -> None:
        notifier.ready(status=f"bare-metal host {host.me} of cluster {host.keys.cluster}")
        log.info("ready: bare-metal host %s of cluster %s (etcd %s)", host.me, host.keys.cluster, host.store.endpoints)

    try:
        run_cycles(
            host.cycle, cfg.health.poll_interval_s, stop, ready, notifier.watchdog, host.status if once else None
        )
        notifier.stopping(status="stopping: this host's trainers are killed")
    finally:
        if not once:
            host.stop()
    return 0


def build_executor(
    env: Mapping[str, str],
    node: str,
    state: DaemonState,
    api: SlurmActions,
    sink: FileSink,
    metrics: DaemonMetrics,
    job_log: Callable[[str, Sequence[str]], None] | None = None,
    *,
    observe: bool = False,
    drain_budget: float | None = None,
) -> Executor:
    """The executor, its action lines to the state dir's actions file and to the log (the journal under systemd)."""
    to_log = logging_sink(log)

    def both(line: str) -> None:
        sink(line)
        to_log(line)

    pause_file = env.get(ENV_PAUSE_FILE)
    return Executor(
        state,
        api,
        ScontrolJobUpdate(api.cli),
        ActionLog(node, both, on_action=metrics.action),
        metrics,
        pause_before=env.get(ENV_PAUSE_BEFORE) or None,
        pause_file=Path(pause_file) if pause_file else None,
        job_log=job_log,
        observe=observe,
        drain_budget=drain_budget,
    )


def slurm_config(api: SlurmActions) -> dict[str, str] | SlurmError:
    """`scontrol show config`, or the error that kept it from being read."""
    try:
        return parse_show_config(api.cli.run("scontrol", "show", "config"))
    except SlurmError as e:
        return e


def check_proctrack(conf: dict[str, str] | SlurmError) -> str | None:
    """Why this daemon cannot tell a job's processes (None: Slurm tracks them with cgroups)."""
    if isinstance(conf, SlurmError):
        return (
            f"cannot read Slurm's configuration ({conf}): if ProctrackType is not proctrack/cgroup, no trainer is "
            "adopted"
        )
    kind = conf.get("ProctrackType", "")
    if kind != "proctrack/cgroup":
        return (
            f"Slurm's ProctrackType is {kind or 'unset'}, not proctrack/cgroup: the daemon knows a job's processes by "
            "their Slurm cgroup (never by their environment), so it adopts no trainer here"
        )
    return None


def recover_pending(executor: Executor) -> None:
    """Finish what a killed predecessor left half done, before anything new is decided."""
    for r in executor.recover(time.time()):
        log.warning("recovered %s %s %s: %s", r.action.id, r.action.kind, r.action.target, r.outcome)


def build_loop(
    cfg: NodeConfig,
    node: str,
    api: SlurmActions,
    executor: Executor,
    seen: JobsSeen,
    env: Mapping[str, str],
    state: DaemonState,
    metrics: DaemonMetrics,
    wake: Callable[[], None] | None = None,
    reads: UserReads | None = None,
) -> tuple[ComputeLoop | HeadLoop, RecoveryWatch | None]:
    """The role's loop (a head loop is started by the caller); a compute node also watches its groups' recoveries (for the metrics)."""
    if cfg.role == "head":
        conf = slurm_config(api)
        # A config that cannot be read is taken as private: the table then shows users nothing squeue might hide.
        mode = table_mode(conf) if not isinstance(conf, SlurmError) else PRIVATE_MODE
        if isinstance(conf, SlurmError):
            log.error("head: cannot read Slurm's configuration (%s): the job table is written 0600", conf)
        head = HeadLoop(cfg, api, executor, time.time, Path(cfg.state_dir) / "logs", metrics=metrics, table_mode=mode)
        return head, None
    gpus = _gpu_check(cfg, env, state) if cfg.gpus else None
    loop = ComputeLoop(cfg, node, api, executor, gpus, time.time, seen, metrics, wake=wake, user_files=reads)
    return loop, RecoveryWatch(metrics)


def status_document(
    node: str, state: DaemonState, last: LastStatus, metrics_server: MetricsServer | None
) -> Callable[[], dict[str, Any]]:
    """What the status socket (and --once) answers: the loop's last cycle, restarts, pending actions, recent events."""

    def document() -> dict[str, Any]:
        snap = state.snapshot()
        return {
            "node": node,
            "pid": os.getpid(),
            "metrics_port": metrics_server.port if metrics_server else None,
            **last.get(),
            "restarts": snap["restarts"],
            "pending": list(snap["pending"].values()),
            "recent_events": snap["events"][-20:],
        }

    return document


def run_cycles(
    one_cycle: Callable[[], object],
    interval: float,
    stop: threading.Event,
    ready: Callable[[], None],
    alive: Callable[[], object],
    once: Callable[[], dict[str, Any]] | None,
    wake: threading.Event | None = None,
    next_in: Callable[[float], float] | None = None,
) -> None:
    """A cycle every `interval` until `stop`: `ready` after the first (systemd's READY=1), `alive` after each (WATCHDOG=1).

    `wake` (set by the stop too) starts the next cycle at once; `next_in(interval)` may bring it sooner than
    the interval. With `once`: one cycle, then its document printed as JSON (`supervise --once`).
    """
    first = True
    while not stop.is_set():
        started = time.monotonic()
        one_cycle()
        if first:
            ready()
            first = False
        alive()
        if once is not None:
            print(json.dumps(once(), default=str))
            return
        pause = interval if next_in is None else next_in(interval)
        (wake or stop).wait(max(0.0, pause - (time.monotonic() - started)))
        if wake is not None:
            wake.clear()  # before the cycle: what sets it from here on is seen by this cycle or starts the next


def warn_if_watchdog_short(env: Mapping[str, str], interval: float) -> None:
    wd = watchdog_interval(env, os.getpid())
    if wd is not None and wd < interval:
        log.warning("watchdog interval %.1f s is shorter than poll_interval_s %.1f s", wd, interval)


def cycle(
    node: str,
    loop: ComputeLoop | HeadLoop,
    last: LastStatus,
    recovery: RecoveryWatch | None,
    publisher: HealthPublisher | None,
) -> None:
    """One cycle: observe and act, publish its status, note recoveries, publish the node's health report."""
    started = time.monotonic()
    loop.cycle()
    # How long the loop's own work took (probes, Slurm reads, actions): what grows if anything grows with
    # the cluster; `lamplighter status` shows it, the scale bench samples the head's.
    status = last.publish(cycle_s=round(time.monotonic() - started, 4))
    if recovery is not None and isinstance(loop, ComputeLoop):
        recovery.observe(time.time(), loop.trainers.values())
    if publisher is not None:
        now = time.time()
        publisher.publish(now, summarize({"node": node, "pid": os.getpid(), **status}, now))
