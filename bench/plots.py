"""goodput.png (goodput per repetition, three strategies) and recovery.png (recovery anatomy per fault kind)."""

from __future__ import annotations

from typing import Any

from bench.results_io import RESULTS

COLORS = {
    "lamplighter": "tab:green",
    "lamplighter-spare": "tab:cyan",
    "ckpt-restart": "tab:blue",
    "poll-10s": "tab:orange",
    "in-job-restart": "tab:red",
    "ddp": "tab:gray",
    "torchft": "tab:olive",
}
PHASE_LABELS = {
    "detect_s": "detected",
    "survivors_commit_s": "survivors commit",
    "failed_runs_s": "failed replica runs",
    "failed_commits_s": "failed replica commits",
    "progress_s": "job makes new progress",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_goodput(runs: list[dict[str, Any]], name: str = "goodput") -> None:
    """Per repetition: each strategy's faulted goodput over the yardstick, and the fault-free rates over it."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    reps = sorted({r["rep"] for r in runs})
    for ax, faulted, title in (
        (axes[0], True, "under the repetition's faults"),
        (axes[1], False, "fault-free"),
    ):
        names = sorted({r["strategy"] for r in runs if r["faulted"] == faulted})
        for s in names:
            pts = [(r["rep"], r["goodput_abs"]) for r in runs if r["strategy"] == s and r["faulted"] == faulted]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=s, color=COLORS.get(s))
        ax.set_xticks(reps, [str(r) for r in reps])
        ax.set_xlabel("repetition")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("samples/s over plain DDP's fault-free rate")
    fig.suptitle("Goodput under identical delivered faults (one yardstick per repetition)")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    plt.close(fig)


def plot_recovery(rec: dict[str, Any], name: str = "recovery") -> None:
    plt = _plt()
    from matplotlib.patches import Patch

    kinds = sorted(rec["table"])
    if not kinds:
        return
    cols = min(2, len(kinds))
    rows = (len(kinds) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(kinds) :]:
        ax.set_visible(False)
    for ax, kind in zip(axes.flat, kinds, strict=False):
        per = rec["table"][kind]
        strategies = [
            s for s in ("lamplighter", "lamplighter-spare", "ckpt-restart", "poll-10s", "in-job-restart") if s in per
        ]
        width = 0.8 / max(1, len(strategies))
        for j, s in enumerate(strategies):
            for i, p in enumerate(PHASE_LABELS):
                d = per[s].get(p)
                x = i + (j - (len(strategies) - 1) / 2) * width
                if d and d.get("n"):
                    ax.bar(
                        x,
                        d["median"],
                        width,
                        color=COLORS[s],
                        label=s if i == 0 else None,
                        yerr=[[d["median"] - d["min"]], [d["max"] - d["median"]]],
                        capsize=2,
                    )
                else:
                    ax.text(x, 0.2, "never", rotation=90, ha="center", va="bottom", fontsize=7, color=COLORS[s])
        ax.set_xticks(range(len(PHASE_LABELS)))
        ax.set_xticklabels(list(PHASE_LABELS.values()), rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("seconds after the fault")
        counts = ", ".join(f"{s}: {per[s]['faults']}" for s in strategies)
        ax.set_title(f"{kind} (faults: {counts})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(handles=[Patch(color=COLORS[s], label=s) for s in strategies], fontsize=8)
    fig.suptitle("Recovery anatomy (median and range over faults)")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    plt.close(fig)
