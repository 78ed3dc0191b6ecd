"""A node lamplighter drained comes back once its checks have passed for a while; a relapse waits for a person."""

from __future__ import annotations

from lamplighter.configs.schema import AutoResumeConfig
from lamplighter.daemon.auto_resume import NodeView, ResumeState, decide

CFG = AutoResumeConfig(passes=3, over_s=600.0, relapse_hold_s=3600.0)
OURS = "lamplighter: GPU 0 (0000:05:00.0) uncorrectable ECC +1 (max 0)"


def run(views: list[tuple[float, NodeView]], state: ResumeState | None = None) -> list[tuple[str, ResumeState]]:
    s = state or ResumeState()
    out = []
    for now, v in views:
        d = decide(now, s, v, CFG)
        s = d.state
        out.append((d.action, s))
    return out


def ok(reason: str = OURS) -> NodeView:
    return NodeView(drained=True, reason=reason, checks_ok=True, checks_said="8 GPU(s) healthy")


def test_resumed_after_passes_spread_over_the_window_and_the_reason_says_so() -> None:
    steps = run([(t, ok()) for t in range(0, 700, 10)])
    first = next(i for i, (a, _) in enumerate(steps) if a == "resume")
    assert first * 10 >= 600  # never before the window is over
    assert [a for a, _ in steps].count("resume") == 1
    d = decide(600.0, ResumeState(drained_at=0.0, passes=3, first_pass_at=0.0, last_pass_at=400.0), ok(), CFG)
    assert d.action == "resume" and "passed 4 times over 10 min" in d.reason and "uncorrectable ECC" in d.reason


def test_a_failing_check_starts_the_count_again() -> None:
    fail = NodeView(drained=True, reason=OURS, checks_ok=False, checks_said="ECC +1")
    steps = run([(0.0, ok()), (250.0, ok()), (450.0, fail), (500.0, ok()), (700.0, ok()), (900.0, ok())])
    assert all(a == "none" for a, _ in steps)
    assert steps[-1][1].passes == 3  # 500, 700, 900: only 400 s apart, the window counts from 500
    assert decide(1100.0, steps[-1][1], ok(), CFG).action == "resume"


def test_passes_in_a_burst_count_once() -> None:
    steps = run([(float(t), ok()) for t in range(0, 100)])
    assert steps[-1][1].passes == 1


def test_never_an_admins_or_slurms_drain() -> None:
    for reason in ("maintenance (alice)", "Duplicate jobid", None):
        assert all(a == "none" for a, _ in run([(t, ok(reason)) for t in range(0, 2000, 100)]))  # type: ignore[arg-type]


def test_drained_again_soon_after_a_resume_is_held_for_a_person() -> None:
    after = ResumeState(resumed_at=1000.0)
    d = decide(1000.0 + 1200, after, ok(), CFG)
    assert d.action == "hold" and "held for a person" in d.reason and "20 min after" in d.reason
    # Held: however long the checks pass.
    assert all(a == "none" for a, _ in run([(t, ok()) for t in range(2300, 9000, 100)], d.state))
    # Later than the hold window, a new drain is an ordinary one.
    assert decide(1000.0 + 7200, after, ok(), CFG).action == "none"


def test_off_does_nothing_and_state_round_trips() -> None:
    off = AutoResumeConfig(enabled=False)
    assert decide(1e6, ResumeState(drained_at=0.0, passes=9, last_pass_at=1.0), ok(), off).action == "none"
    s = ResumeState(drained_at=1.0, passes=2, last_pass_at=3.0, resumed_at=None, held=True)
    assert ResumeState.from_json({**s.to_json(), "future_field": 1}) == s
