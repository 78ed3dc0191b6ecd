"""What happened to each injected fault (and each failure nobody injected), with times in epoch seconds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class FaultRecord:
    kind: str  # a chaos kind, or "unplanned" for a failure the supervisor saw but nobody injected
    group: int | None  # None: the Lighthouse
    planned_at_s: float | None  # seconds after training started, as planned; None when unplanned
    t_injected: float | None
    attempt: int  # the target group's (or Lighthouse's) attempt when the fault hit
    t_detected: float | None = None
    t_restarted: float | None = None
    detected_as: str = ""  # the observation's reason
    t_planned: float | None = None  # when the schedule said it fires (epoch s): late_s = t_injected - t_planned
    warm: bool | None = None  # the restart turned a warm standby into the group (None: not restarted)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def target(self) -> str:
        return "lighthouse" if self.group is None else f"group {self.group}"


class FaultJournal:
    """Faults in injection order; detection and restart are attached to the oldest open fault of the target."""

    def __init__(self) -> None:
        self.faults: list[FaultRecord] = []

    def injected(self, rec: FaultRecord) -> None:
        self.faults.append(rec)

    def detected(self, group: int | None, attempt: int, t: float, reason: str) -> FaultRecord:
        """Attach a failure to the faults that caused it, or record it as unplanned.

        Faults that overlap on one attempt (a second one before the first was seen) are all seen
        by the one failure: each gets the detection, timed from its own injection.
        """
        hit = [f for f in self.faults if f.group == group and f.attempt == attempt and f.t_detected is None]
        if not hit:
            hit = [FaultRecord(kind="unplanned", group=group, planned_at_s=None, t_injected=None, attempt=attempt)]
            self.faults.append(hit[0])
        for f in hit:
            f.t_detected = t
            f.detected_as = reason
        return hit[0]

    def restarted(self, group: int | None, t: float, warm: bool = False) -> None:
        for f in self.faults:
            if f.group == group and f.t_detected is not None and f.t_restarted is None:
                f.t_restarted = t
                f.warm = warm
