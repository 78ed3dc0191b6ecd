"""timeline.png: loss and participating groups over time, with every fault marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lamplighter.rundir.steplog import StepRecord

# Every fault kind a report can hold (configs/schema.py ChaosKind, the bare-metal demo's host-crash, faults no
# plan injected) has a colour of its own; related kinds share a hue (the GPU faults are greens).
COLOURS = {
    "kill": "tab:red",
    "kill-healer": "lightcoral",
    "hang": "tab:purple",
    "hang-collective": "orchid",
    "exception": "tab:orange",
    "gpu": "tab:green",
    "gpu-hang": "yellowgreen",
    "gpu-lost": "darkgreen",
    "node-crash": "black",
    "host-crash": "dimgray",
    "partition": "tab:cyan",
    "lighthouse-kill": "tab:brown",
    "supervisor-kill": "tab:blue",
    "slurmctld-restart": "tab:olive",
    "unplanned": "tab:gray",
}


def plot_timeline(by_group: dict[int, list[StepRecord]], report: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the timeline plot needs matplotlib: pip install 'lamplighter[plots]'") from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = report.get("t_training_started") or report["t_start"]
    fig, (ax_loss, ax_groups) = plt.subplots(2, 1, sharex=True, figsize=(11, 6), gridspec_kw={"height_ratios": [3, 1]})
    per_step: dict[int, tuple[float, set[int]]] = {}
    for g, recs in sorted(by_group.items()):
        c = [r for r in recs if r.committed]
        colour = None
        for attempt in sorted({r.attempt for r in c}):  # one line per attempt: no line across the downtime
            part = [r for r in c if r.attempt == attempt]
            (line,) = ax_loss.plot(
                [r.t - t0 for r in part],
                [r.loss for r in part],
                ".-",
                ms=2,
                lw=0.8,
                color=colour,
                label=f"group {g}" if colour is None else None,
            )
            colour = line.get_color()
        for r in c:
            t, gs = per_step.get(r.step, (r.t, set()))
            gs.add(g)
            per_step[r.step] = (min(t, r.t), gs)
    steps = sorted(per_step.items(), key=lambda kv: kv[1][0])
    ax_groups.step([v[0] - t0 for _, v in steps], [len(v[1]) for _, v in steps], where="post", color="black", lw=1)
    ax_groups.set_ylim(0, max(len(by_group), 1) + 0.5)
    ax_groups.set_ylabel("groups\ncommitting")
    ax_groups.set_xlabel("seconds since training started")
    ax_loss.set_ylabel("loss")
    seen: set[str] = set()
    for f in report["faults"]:
        t = f["t_injected"] if f["t_injected"] is not None else f["t_detected"]
        if t is None:
            continue
        colour = COLOURS.get(f["kind"], "tab:gray")
        for ax in (ax_loss, ax_groups):
            ax.axvline(
                t - t0,
                color=colour,
                ls="--",
                lw=1,
                label=f["kind"] if ax is ax_loss and f["kind"] not in seen else None,
            )
        if f["t_first_commit_after"] is not None:
            ax_groups.axvspan(t - t0, f["t_first_commit_after"] - t0, color=colour, alpha=0.15)
        target = "LH" if f["group"] is None else f"g{f['group']}"
        ax_loss.annotate(target, (t - t0, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color=colour, va="top")
        seen.add(f["kind"])
    if seen:  # a run without faults has nothing to name
        ax_loss.legend(fontsize=7, ncol=4)
    ax_loss.set_title(
        f"{report.get('job', '')}: {report['steps_committed']} steps, {report['steps_lost']} lost, "
        f"weights identical: {report['weights_identical']}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
