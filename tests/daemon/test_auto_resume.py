"""A node lamplighter drained comes back once its checks have passed for a while; a relapse waits for a person."""

from __future__ import annotations

from lamplighter.configs.schema import AutoResumeConfig
from lamplighter.supervisor.node.auto_resume import (
    NodeView,
    ResumeLimit,
    ResumeState,
    decide,
    marked_at,
    may_mark,
    resume_mark,
)

CFG = AutoResumeConfig(passes=3, over_s=600.0, relapse_hold_s=3600.0)
LIMIT = ResumeLimit(max_fraction=0.25, window_s=3600.0)  # 1 of 4 nodes per hour
OURS = "lamplighter: GPU 0 (0000:05:00.0) uncorrectable ECC +1 (max 0)"


def run(views: list[tuple[float, NodeView]], state: ResumeState | None = None) -> list[tuple[str, ResumeState]]:
    s = state or ResumeState()
    out = []
    for now, v in views:
        d = decide(now, s, v, CFG, LIMIT)
        s = d.state
        out.append((d.action, s))
    return out


def ok(reason: str = OURS, resumes: tuple[tuple[float, str], ...] = ()) -> NodeView:
    return NodeView(True, reason, True, "8 GPU(s) healthy", node="n1", total_nodes=4, resumes=resumes)


def test_resumed_after_passes_spread_over_the_window_and_the_reason_says_so() -> None:
    steps = run([(t, ok()) for t in range(0, 700, 10)])
    first = next(i for i, (a, _) in enumerate(steps) if a == "resume")
    assert first * 10 >= 600  # never before the window is over
    assert [a for a, _ in steps].count("resume") == 1
    d = decide(600.0, ResumeState(drained_at=0.0, passes=3, first_pass_at=0.0, last_pass_at=400.0), ok(), CFG, LIMIT)
    assert d.action == "resume" and "passed 4 times over 10 min" in d.reason and "uncorrectable ECC" in d.reason


def test_a_failing_check_starts_the_count_again() -> None:
    fail = NodeView(True, OURS, False, "ECC +1", node="n1", total_nodes=4)
    steps = run([(0.0, ok()), (250.0, ok()), (450.0, fail), (500.0, ok()), (700.0, ok()), (900.0, ok())])
    assert all(a == "none" for a, _ in steps)
    assert steps[-1][1].passes == 3  # 500, 700, 900: only 400 s apart, the window counts from 500
    assert decide(1100.0, steps[-1][1], ok(), CFG, LIMIT).action == "resume"


def test_passes_in_a_burst_count_once() -> None:
    steps = run([(float(t), ok()) for t in range(0, 100)])
    assert steps[-1][1].passes == 1


def test_never_an_admins_or_slurms_drain() -> None:
    for reason in ("maintenance (alice)", "Duplicate jobid", None):
        assert all(a == "none" for a, _ in run([(t, ok(reason)) for t in range(0, 2000, 100)]))  # type: ignore[arg-type]


def test_drained_again_soon_after_a_resume_is_held_for_a_person() -> None:
    after = ResumeState(resumed_at=1000.0)
    d = decide(1000.0 + 1200, after, ok(), CFG, LIMIT)
    assert d.action == "hold" and "held for a person" in d.reason and "20 min after" in d.reason
    # Held: however long the checks pass.
    assert all(a == "none" for a, _ in run([(t, ok()) for t in range(2300, 9000, 100)], d.state))
    # Later than the hold window, a new drain is an ordinary one.
    assert decide(1000.0 + 7200, after, ok(), CFG, LIMIT).action == "none"


def test_off_does_nothing_and_state_round_trips() -> None:
    off = AutoResumeConfig(enabled=False)
    assert decide(1e6, ResumeState(drained_at=0.0, passes=9, last_pass_at=1.0), ok(), off, LIMIT).action == "none"
    s = ResumeState(drained_at=1.0, passes=2, last_pass_at=3.0, resumed_at=None, held=True)
    assert ResumeState.from_json({**s.to_json(), "future_field": 1}) == s


def test_a_resume_is_refused_over_the_clusters_limit_and_done_once_the_window_moves_on() -> None:
    ready = ResumeState(drained_at=0.0, passes=3, first_pass_at=0.0, last_pass_at=400.0)
    other = ((300.0, "n2"),)  # another node's daemon resumed n2 five minutes ago (its Comment says so)
    d = decide(600.0, ready, ok(resumes=other), CFG, LIMIT)
    assert d.action == "refused" and "resume limit reached: 1 of 4 nodes resumed in the last 3600 s" in d.reason
    assert d.state.passes == 4 and d.state.first_pass_at == 0.0  # the passes are kept (this one counted)
    assert decide(300.0 + 3600.1, d.state, ok(resumes=other), CFG, LIMIT).action == "resume"
    # Its own resume in the window does not block it (nothing new), and an unknown cluster size refuses.
    assert decide(600.0, ready, ok(resumes=((300.0, "n1"),)), CFG, LIMIT).action == "resume"
    unknown = NodeView(True, OURS, True, "ok", node="n1", total_nodes=0)
    assert "cluster size unknown" in decide(600.0, ready, unknown, CFG, LIMIT).reason


def test_the_resume_mark_round_trips_and_never_takes_an_admins_comment() -> None:
    mark = resume_mark(1764230000.4)
    assert (
        mark.startswith("lamplighter: resumed at 1764230000 (2025-11-27T07:53:20Z)") and marked_at(mark) == 1764230000.0
    )
    assert may_mark(None) and may_mark("") and may_mark(mark)
    for admin in ("rack 7, new PSU (alice)", "lamplighter: resumed by bob", "lamplighter: resumed at soon"):
        assert marked_at(admin) is None and not may_mark(admin)
