"""The node's own checks besides each GPU's, and the way back for a node this daemon drained.

`NodeChecks.faults` turns this cycle's readings (the links training uses,
from sysfs; the GPU count against node.yaml's gpu_count) into node events the
policy answers with a drain (supervisor/node_faults.py). `NodeChecks.resume`
asks, at most once per pass interval and only while this daemon's own drain
stands, what Slurm says of the node, and feeds daemon/auto_resume.py's
decision; its state lives in the daemon's state store, so a restart neither
forgets a relapse nor counts a pass twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lamplighter.configs.schema import NodeConfig
from lamplighter.daemon.auto_resume import STATE_KEY, NodeView, ResumeState, decide
from lamplighter.daemon.node_policy import REASON_PREFIX, NodeAction, NodeEvent
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.links import LinkCheck, LinkReader, SysfsLinks
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.node_faults import gpu_count_fault

log = logging.getLogger("lamplighter.daemon")


def gpus_pass(gpus: Sequence[GpuObservation] | None) -> tuple[bool, str]:
    """Whether this cycle's GPU readings vouch for the node: every GPU read and healthy (no GPU check: yes)."""
    if gpus is None:
        return True, "no GPU check"
    if not gpus:
        return False, "no GPU reading this cycle"
    bad = [g for g in gpus if g.status != "ok"]
    if bad:
        return False, "; ".join(g.reason for g in bad)
    return True, f"{len(gpus)} GPU(s) healthy"


@dataclass
class NodeChecks:
    cfg: NodeConfig
    node: str
    api: SlurmApi
    get_state: Callable[[str], Any]  # one of the daemon's persisted policy entries
    set_state: Callable[[float, str, Any], None]
    links: LinkReader | None = None  # default: the configured links in /sys
    _link_check: LinkCheck | None = field(init=False, default=None)
    _next_look: float = field(init=False, default=0.0)
    _faults_now: list[NodeEvent] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        net = self.cfg.network
        reader = self.links
        if reader is None and (net.interfaces or net.rdma):
            reader = SysfsLinks(tuple(net.interfaces), tuple(net.rdma))
        if reader is not None:
            self._link_check = LinkCheck(reader, net)

    def faults(self, now: float, gpus: Sequence[GpuObservation] | None) -> list[NodeEvent]:
        out: list[NodeEvent] = []
        if self._link_check is not None:
            out += [NodeEvent(f.kind, f.reason) for f in self._link_check.observe(now)]
        if gpus is not None and gpus:
            low = gpu_count_fault(self.cfg.gpu_count, sum(1 for g in gpus if g.kind != "lost"))
            if low is not None:
                out.append(NodeEvent(low.kind, low.reason))
        self._faults_now = out
        return out

    def resume(
        self, now: float, gpus: Sequence[GpuObservation] | None, drained_here_at: Callable[[], float | None]
    ) -> list[NodeAction]:
        """An auto-resume or a hold, when it is due; `drained_here_at`: this daemon's last drain of the node."""
        ar = self.cfg.auto_resume
        if not ar.enabled or now < self._next_look:
            return []
        state = ResumeState.from_json(self.get_state(STATE_KEY) or {})
        last_drain = drained_here_at()
        ours_since_resume = last_drain is not None and last_drain > (state.resumed_at or 0.0)
        if not (ours_since_resume or state.drained_at is not None or state.held):
            return []
        self._next_look = now + ar.over_s / ar.passes / 2  # twice per pass interval: one Slurm call, this node only
        try:
            info = self.api.node(self.node)
        except SlurmError as e:
            log.warning("auto-resume: cannot read %s from Slurm: %s", self.node, e)
            return []
        ok, said = gpus_pass(gpus)
        if ok and self._faults_now:
            ok, said = False, "; ".join(f.reason for f in self._faults_now)
        d = decide(now, state, NodeView(info.is_drained, info.reason, ok, said), ar)
        if d.state != state:
            self.set_state(now, STATE_KEY, d.state.to_json())
        if d.action == "resume":
            return [NodeAction("resume", self.node, d.reason, {"type": "auto-resume", "checks": said})]
        if d.action == "hold":
            was = (info.reason or "").removeprefix(REASON_PREFIX)
            reason = f"{REASON_PREFIX}{d.reason.removeprefix(REASON_PREFIX)}; was: {was}"[:900]
            return [NodeAction("drain", self.node, reason, {"type": "auto-resume-hold"})]
        return []
