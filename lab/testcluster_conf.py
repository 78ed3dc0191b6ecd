"""slurm.conf of the single-machine test cluster, every non-obvious value with its reason."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lamplighter.lab.testcluster_net import ClusterNet


def render_slurm_conf(
    root: Path,
    nodes: int,
    base_port: int,
    overrides: Mapping[str, str] | None = None,
    *,
    first_job_id: int = 1,
    sockets: Path | None = None,
    network: ClusterNet | None = None,
) -> str:
    """slurm.conf for `nodes` slurmd on localhost; slurmctld on base_port, nodes on the ports after it.

    sockets: a short folder for munged's socket and the spool (a Unix socket's path takes at most 107 bytes);
    default: under root.

    network: each node in a network namespace of its own (testcluster_net): slurmctld on the bridge's
    address, every node at its own NodeAddr and all on the one port after slurmctld's.

    overrides: `Key=Value` settings that replace the line of the same key, or are added before the nodes
    (a test's HealthCheckProgram, Prolog, SchedulerParameters).
    """
    text = _conf(root, nodes, base_port, first_job_id, sockets or root, *_placement(nodes, base_port, network))
    extra = dict(overrides or {})
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0]
        if key in extra and not line.startswith("#"):
            line = f"{key}={extra.pop(key)}"
        if line.startswith("NodeName=") and extra:
            lines += ["# Set by the test that started this cluster."] + [f"{k}={v}" for k, v in extra.items()]
            extra = {}
        lines.append(line)
    return "\n".join(lines) + "\n"


def _placement(nodes: int, base_port: int, net: ClusterNet | None) -> tuple[str, str]:
    """SlurmctldHost, and where the nodes are (NodeName's address and port settings)."""
    if net is None:
        return "localhost", f"NodeHostname=localhost Port=[{base_port + 1}-{base_port + nodes}]"
    # `localhost` passes slurmctld's check that it runs on SlurmctldHost; the address in brackets is where
    # every client and slurmd, on the host or in a node's namespace, reaches it (the bridge's).
    # One address per node (hostlist order = NodeName order) and one port for all: each slurmd listens in its
    # own namespace.
    return f"localhost({net.gateway})", f"NodeHostname=localhost NodeAddr={net.node_addr_range()} Port={base_port + 1}"


def _conf(root: Path, nodes: int, base_port: int, first_job_id: int, sockets: Path, ctld: str, where: str) -> str:
    r = root
    return f"""\
# Test cluster under {r} (written by lamplighter.lab.testcluster; do not edit).
# Clusters on one machine stay apart by folder and ports, not by name.
ClusterName=lltest
SlurmctldHost={ctld}
SlurmctldPort={base_port}
# Everything runs as root in the sandbox; there is no slurm user.
SlurmUser=root
AuthType=auth/munge
# Own munged per cluster; cred_expire=5 (default 120) because a requeued job
# may not start before BeginTime = now + cred_expire + 1.
AuthInfo=socket={sockets}/munge/sock,cred_expire=5
StateSaveLocation={r}/state
SlurmdSpoolDir={sockets}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
# No mail server here; the default MailProg would log an error per job.
MailProg=/bin/true
MpiDefault=none
# Slurm's own cgroups (v1, cgroup.conf beside this file): a task's /proc/PID/cgroup names its job and
# step, which is how the node daemons tell a job's processes from ones that only carry its variables.
# Nothing is constrained (cgroup.conf): the nodes share this machine's CPUs and memory.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectType=select/cons_tres
# Cores only: jobs that ask for no memory do not take a whole node's memory.
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: Restarts=N in `scontrol show job` replaces sacct.
AccountingStorageType=accounting_storage/none
# Jobs of a failed node are requeued (lamplighter's recovery path).
JobRequeue=1
# A node that was DOWN (for any reason) returns once its slurmd registers again.
ReturnToService=2
# Notice a dead node in seconds, not the default 300 s.
SlurmdTimeout=3
MessageTimeout=3
# SIGKILL 2 s after SIGTERM when a job is cancelled or requeued.
KillWait=2
# Cgroup paths are machine-wide (/slurm_<node>/uid_<uid>/job_<id>) and every cluster names its nodes
# n1..nN: each cluster numbers its jobs from a range of its own (testcluster.reserve_first_job_id).
FirstJobId={first_job_id}
# Keep finished jobs visible to scontrol for 10 minutes (tests read their end state).
MinJobAge=600
# Schedule every second and start batch jobs without delay.
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
NodeName=n[1-{nodes}] {where} CPUs=2 RealMemory=1000
# A partition above debug that preempts its jobs by requeueing them, as a site's high-priority partition
# does (the preemption test submits there); nothing else uses it.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10
"""


# Slurm reads cgroup.conf from the folder of slurm.conf. cgroup/v1: this machine mounts the v1 hierarchies
# (freezer, cpuset, ...) at /sys/fs/cgroup; nothing is constrained, only tracked.
CGROUP_CONF = """\
# Test cluster (written by lamplighter.lab.testcluster; do not edit): track, constrain nothing.
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=no
"""
