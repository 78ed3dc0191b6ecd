"""The node's own checks besides each GPU's, and the way back for a node this daemon drained.

`NodeChecks.faults` turns this cycle's readings (the links training uses,
from sysfs; the GPU count against node.yaml's gpu_count) into node events the
policy answers with a drain (policy/node_faults.py). `NodeChecks.resume`
asks, at most once per pass interval and only while this daemon's own drain
stands, what Slurm says of the nodes (this one's state, and the resume marks
every daemon leaves in node Comments, for the resume rate limit), and feeds
supervisor/node/auto_resume.py's decision; its state lives in the daemon's state store, so a restart neither
forgets a relapse nor counts a pass twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lamplighter.configs.schema import NodeConfig
from lamplighter.policy.node_faults import gpu_count_fault, gpus_found
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.parsers import NodeInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.links import LinkCheck, LinkReader, SysfsLinks
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.node.auto_resume import (
    STATE_KEY,
    NodeView,
    ResumeDecision,
    ResumeLimit,
    ResumeState,
    decide,
    marked_at,
    may_mark,
    resume_mark,
)
from lamplighter.supervisor.node_policy import REASON_PREFIX, NodeAction, NodeEvent

log = logging.getLogger("lamplighter.supervisor")
REFUSED_REPEAT_S = 300.0  # a resume the rate limit keeps refusing is reported this often


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
    # Slurm's node list at `now`; the compute loop shares its cached view (loop.CLUSTER_VIEW_S).
    cluster: Callable[[float], list[NodeInfo]] | None = None
    _link_check: LinkCheck | None = field(init=False, default=None)
    _next_look: float = field(init=False, default=0.0)
    _faults_now: list[NodeEvent] = field(init=False, default_factory=list)
    _refused_said_at: float | None = field(init=False, default=None)

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
        if gpus is not None:
            low = gpu_count_fault(self.cfg.gpu_count, gpus_found(gpus))
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
        self._next_look = now + ar.over_s / ar.passes / 2  # twice per pass interval: one Slurm call
        try:
            nodes = self.cluster(now) if self.cluster is not None else self.api.nodes()
            d, info, said = self._decide(now, state, gpus, nodes)
            if d.action == "resume" and self.cluster is not None:
                # The shared view may be 15 s old: another daemon's resume in that time must count.
                d, info, said = self._decide(now, state, gpus, self.api.nodes())
        except SlurmError as e:
            log.warning("auto-resume: cannot read the nodes from Slurm: %s", e)
            return []
        if info is None:
            log.warning("auto-resume: Slurm lists no node %r", self.node)
            return []
        if d.state != state:
            self.set_state(now, STATE_KEY, d.state.to_json())
        if d.action == "resume":
            self._refused_said_at = None
            mark = resume_mark(now) if may_mark(info.fields.get("Comment")) else None
            return [NodeAction("resume", self.node, d.reason, {"type": "auto-resume", "checks": said, "mark": mark})]
        if d.action == "refused":
            if self._refused_said_at is not None and now - self._refused_said_at < REFUSED_REPEAT_S:
                return []
            self._refused_said_at = now
            return [NodeAction("report", self.node, d.reason, {"type": "auto-resume-refused"})]
        if d.action == "hold":
            was = (info.reason or "").removeprefix(REASON_PREFIX)
            reason = f"{REASON_PREFIX}{d.reason.removeprefix(REASON_PREFIX)}; was: {was}"[:900]
            return [NodeAction("drain", self.node, reason, {"type": "auto-resume-hold"})]
        return []

    def _decide(
        self, now: float, state: ResumeState, gpus: Sequence[GpuObservation] | None, nodes: list[NodeInfo]
    ) -> tuple[ResumeDecision, NodeInfo | None, str]:
        """The decision on what Slurm lists, the node's own entry, and what its checks said."""
        info = next((n for n in nodes if n.name == self.node), None)
        if info is None:
            return ResumeDecision("none", "not listed", state), None, ""
        resumes = [(t, n.name) for n in nodes if (t := marked_at(n.fields.get("Comment"))) is not None]
        if state.resumed_at is not None:
            resumes.append((state.resumed_at, self.node))  # known here even where an admin's Comment kept no mark
        ok, said = gpus_pass(gpus)
        if ok and self._faults_now:
            ok, said = False, "; ".join(f.reason for f in self._faults_now)
        view = NodeView(info.is_drained, info.reason, ok, said, self.node, len(nodes), tuple(resumes))
        return decide(now, state, view, self.cfg.auto_resume, self._limit()), info, said

    def _limit(self) -> ResumeLimit:
        return ResumeLimit(self.cfg.max_drain_fraction, self.cfg.drain_window_s)
