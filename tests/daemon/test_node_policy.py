"""The node daemon's pure policy: table-driven, no Slurm, no processes."""

from __future__ import annotations

import pytest

from lamplighter.configs.schema import NodeConfig
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.supervisor.daemon.node_policy import (
    Context,
    GpuEvent,
    JobTrack,
    LocalJob,
    NodePolicyState,
    TrainerEvent,
    decide,
)

CFG = NodeConfig(
    restart={
        "budget_per_group": 3,
        "crash_loop_max": 3,
        "crash_loop_window_s": 100,
        "backoff_initial_s": 2,
        "backoff_factor": 2,
    }
)
JOB = LocalJob("17", "demo", 2, 1, ((4242, 99),))
CTX = Context("n1", {"17": JOB}, total_nodes=4)
ECC = GpuEvent(3, "fault", "ecc-uncorrectable", "GPU 3 uncorrectable ECC +2")


def kinds(actions: list) -> list[str]:  # type: ignore[type-arg]
    return [a.kind for a in actions]


@pytest.mark.parametrize(
    ("events", "ctx", "state", "want"),
    [
        ([ECC], CTX, NodePolicyState(), ["kill_local", "drain", "requeue"]),
        ([GpuEvent(3, "unknown", "starting", "x")], CTX, NodePolicyState(), []),
        (
            [ECC],
            Context("n1", {"17": JOB}, node_drained_by_us=True, total_nodes=4),
            NodePolicyState(),
            ["kill_local", "requeue"],
        ),
        # Rate limit: 1 of 4 nodes at 0.25 already drained elsewhere: jobs still move, the drain is refused loudly.
        (
            [ECC],
            Context("n1", {"17": JOB}, drain_history=((0.0, "n2"),), total_nodes=4),
            NodePolicyState(),
            ["kill_local", "log", "requeue"],
        ),
        ([TrainerEvent("exit", "17", 1, "exit 1", code=1)], CTX, NodePolicyState(), ["kill_local", "requeue"]),
        ([TrainerEvent("exit", "17", 1, "done", code=0)], CTX, NodePolicyState(), []),
        ([TrainerEvent("exit", "17", 1, "refused", code=78)], CTX, NodePolicyState(), ["kill_local", "give_up"]),
        ([TrainerEvent("hang", "17", 1, "hung")], CTX, NodePolicyState(), ["kill_local", "requeue"]),
        # An earlier attempt's straggler, or a job already handled: ignored.
        ([TrainerEvent("exit", "17", 0, "old", code=1)], CTX, NodePolicyState({"17": JobTrack(0)}), []),
        ([TrainerEvent("exit", "17", 1, "again", code=1)], CTX, NodePolicyState({"17": JobTrack(1)}), []),
        # Budget: attempt 3 of budget 3; crash loop: 2 recent failures + this one.
        ([TrainerEvent("exit", "17", 3, "x", code=1)], CTX, NodePolicyState(), ["kill_local", "give_up"]),
        (
            [TrainerEvent("exit", "17", 1, "x", code=1)],
            CTX,
            NodePolicyState({"17": JobTrack(0, "running", (50.0, 90.0))}),
            ["kill_local", "give_up"],
        ),
    ],
)
def test_decide(events: list, ctx: Context, state: NodePolicyState, want: list[str]) -> None:  # type: ignore[type-arg]
    _, actions = decide(100.0, state, events, CFG, ctx)
    assert kinds(actions) == want


def test_gpu_fault_reason_and_placement() -> None:
    _, actions = decide(100.0, NodePolicyState(), [ECC], CFG, CTX)
    drain = next(a for a in actions if a.kind == "drain")
    assert drain.target == "n1" and drain.reason == "lamplighter: GPU 3 uncorrectable ECC +2"
    requeue = next(a for a in actions if a.kind == "requeue")
    assert requeue.exclude_node == "n1" and requeue.start_at == 100.0 and requeue.group == "demo/g2"


def test_backoff_and_state_round_trip() -> None:
    st, actions = decide(100.0, NodePolicyState(), [TrainerEvent("exit", "17", 2, "x", code=1)], CFG, CTX)
    assert next(a for a in actions if a.kind == "requeue").start_at == 100.0 + 8.0  # 2 * 2**2
    assert NodePolicyState.from_json(st.to_json()) == st
    # The same observation again (next cycle): nothing new.
    _, again = decide(101.0, st, [TrainerEvent("exit", "17", 2, "x", code=1)], CFG, CTX)
    assert again == []


def test_hostlist() -> None:
    assert expand_hostlist("n[1-3,5],gpu07") == ["n1", "n2", "n3", "n5", "gpu07"]
    assert expand_hostlist("a[08-10]") == ["a08", "a09", "a10"]


def test_script_exclusions_last_one_wins_as_in_sbatch() -> None:
    from lamplighter.slurm.requeue import script_exclusions

    script = '#!/bin/bash\n#SBATCH --job-name="x"\n#SBATCH --exclude="n1"\n#SBATCH -x n[2-3]\nsrun true\n'
    assert script_exclusions(script) == ["n2", "n3"]
    assert script_exclusions("#SBATCH --exclude=n1\n# SBATCH --exclude=n9\n") == ["n1"]
    assert script_exclusions("#!/bin/bash\nsrun true\n") == []
