"""The hang limit learned from the job's own pace: a DiLoCo job that advances torchft's step only at a sync.

Progress is read from the Lighthouse through the real parser's records (LighthouseProgress), as for any torchft
trainer; the time is passed in, so nothing sleeps.
"""

from __future__ import annotations

import pytest
from static_table import StaticTable

from lamplighter.configs.schema import HealthConfig
from lamplighter.lighthouse.progress import LighthouseProgress
from lamplighter.lighthouse.status import LighthouseStatus, Member
from lamplighter.supervisor.checks.hang import HangCheck
from lamplighter.supervisor.checks.progress_pace import PaceRule, ProgressPace, hang_limit, pace_rule
from lamplighter.system.trainer_proc import TrainerProc

SYNC_S = 12.0  # the DiLoCo sync interval: more than the hang timeout
HEALTH = HealthConfig(hang_timeout_s=5.0, startup_timeout_s=60.0, hang_pace_factor=2.0, hang_timeout_max_s=40.0)


def status(steps: dict[str, int]) -> LighthouseStatus:
    members = [Member(rid, step, "http://h:1", "h:2", 1, False) for rid, step in steps.items()]
    return LighthouseStatus(1, "", 1, 0.1, members, [])


class DiLoCoJob:
    """Two groups syncing every SYNC_S seconds from t=0, as their Lighthouse shows them; a hung one stops."""

    def __init__(self, health: HealthConfig = HEALTH) -> None:
        self.steps = {"torchtitan_ft_0:a": 0, "torchtitan_ft_1:b": 0}
        self.hung: set[str] = set()
        self.lp = LighthouseProgress(lambda: status(self.steps))
        procs = [TrainerProc(group=g, rank=0, attempt=0, pid=100 + g, started_at=0.0) for g in (0, 1)]
        self.check = HangCheck(
            StaticTable(procs), [self.lp], health.hang_timeout_s, health.startup_timeout_s, pace_rule=pace_rule(health)
        )

    def run(self, until: float, every: float = 1.0) -> dict[float, list[int]]:
        """Poll every `every` s up to `until`; the groups sync at each multiple of SYNC_S. Hung groups per poll."""
        seen: dict[float, list[int]] = {}
        t = 0.0
        while t <= until:
            if t > 0 and t % SYNC_S == 0:
                for rid in self.steps:
                    if rid not in self.hung:
                        self.steps[rid] += 1
            hung = self.check.observe(t)
            if hung:
                seen[t] = [h.group for h in hung]
            t += every
        return seen


def test_a_diloco_group_is_not_hung_between_syncs_longer_than_the_hang_timeout() -> None:
    job = DiLoCoJob()
    assert job.run(until=120.0) == {}  # 10 syncs 12 s apart, hang timeout 5 s: never hung
    assert job.check.pace.longest_s == pytest.approx(SYNC_S)


def test_a_real_hang_inside_the_inner_loop_is_seen_after_k_sync_intervals_not_minutes() -> None:
    job = DiLoCoJob()
    t, found = 0.0, []
    while t <= 120.0 and not found:
        if t > 0 and t % SYNC_S == 0:
            job.steps["torchtitan_ft_0:a"] += 1
            if t <= 36.0:
                job.steps["torchtitan_ft_1:b"] += 1  # group 1 hangs in its inner loop after the sync at 36 s
        found = job.check.observe(t)
        t += 1.0
    [hung] = found
    # Hung 2 x 12 s after its last sync (36 s), not after the 5 s hang timeout, nor the 60 s start-up timeout.
    assert hung.group == 1 and hung.last_step == 3 and hung.timeout_s == pytest.approx(2 * SYNC_S)
    assert 36.0 + 2 * SYNC_S < t - 1.0 <= 36.0 + 2 * SYNC_S + 1.0
    assert "2 x the longest progress interval 12.0 s" in hung.reason, hung.reason


def test_before_any_interval_the_start_up_timeout_applies() -> None:
    """The first sync interval is already longer than the hang timeout: nothing is known of the pace yet."""
    limit, why = hang_limit(pace_rule(HEALTH), 0.0)
    assert limit == 60.0 and why.startswith("startup_timeout_s 60"), why
    job = DiLoCoJob()
    assert job.run(until=SYNC_S + 6.0) == {}  # 6 s after the first sync, before the second: not hung


@pytest.mark.parametrize(
    ("longest", "limit"),
    [(1.0, 5.0), (2.4, 5.0), (3.0, 6.0), (12.0, 24.0), (30.0, 40.0)],  # never below the timeout, never above the cap
)
def test_the_limit_is_k_times_the_longest_interval_between_the_timeout_and_the_cap(
    longest: float, limit: float
) -> None:
    assert hang_limit(PaceRule(5.0, factor=2.0, cap_s=40.0, learning_s=60.0), longest)[0] == pytest.approx(limit)


def test_factor_zero_keeps_the_fixed_timeout() -> None:
    assert hang_limit(PaceRule(5.0, factor=0.0), 0.0)[0] == 5.0
    assert hang_limit(PaceRule(5.0, factor=0.0), 100.0)[0] == 5.0
    job = DiLoCoJob(HealthConfig(hang_timeout_s=5.0, startup_timeout_s=60.0, hang_pace_factor=0))
    job.hung.add("torchtitan_ft_1:b")  # group 1 never syncs: group 0's silence between syncs is its own
    seen = job.run(until=30.0)
    first = min(seen)
    assert seen[first] == [0] and SYNC_S < first < 2 * SYNC_S  # between syncs, the fixed 5 s calls it hung


def test_intervals_that_span_a_restart_or_an_unreadable_lighthouse_teach_nothing() -> None:
    pace = ProgressPace()
    pace.saw(0, 0, 10.0, excused_until=0.0, starts=[0.0])
    pace.saw(0, 0, 30.0, excused_until=0.0, starts=[0.0, 20.0])  # group 1 restarted at 20: a wait for it
    pace.saw(0, 0, 50.0, excused_until=45.0, starts=[0.0, 20.0])  # the Lighthouse was unreadable until 45
    assert pace.longest_s == 0.0
    pace.saw(0, 0, 53.0, excused_until=45.0, starts=[0.0, 20.0])
    pace.saw(0, 0, 53.0, excused_until=45.0, starts=[0.0, 20.0])  # seen again: no new interval
    assert pace.longest_s == pytest.approx(3.0)


def test_validate_says_what_the_hang_check_will_do() -> None:
    said = pace_rule(HEALTH).describe()
    assert said == (
        "hung after no progress for max(5 s, 2 x the longest interval between two progress marks seen in this job, "
        "at most 40 s); 60 s until one interval was seen"
    )
