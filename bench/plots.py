"""goodput.png (goodput vs. MTBF, three strategies) and recovery.png (recovery anatomy per fault kind)."""

from __future__ import annotations

from typing import Any

from bench.results_io import RESULTS

COLORS = {"lamplighter": "tab:green", "ckpt-restart": "tab:blue", "poll-10s": "tab:orange"}
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


def plot_goodput(good: dict[str, Any], name: str = "goodput") -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    mtbfs = sorted({float(m) for per in good["table"].values() for m in per if m != "fault-free"})
    ticks = [*mtbfs, max(mtbfs, default=30.0) * 2]
    labels = [f"{m:g}" for m in mtbfs] + ["none"]
    for ax, metric, label in (
        (axes[0], "goodput_rel", "goodput / own fault-free run"),
        (axes[1], "goodput_samples_per_s", "committed samples per second"),
    ):
        for s, per in sorted(good["table"].items()):
            levels = [m for m in per if m != "fault-free"]
            xs = [float(m) for m in levels]
            if "fault-free" in per:
                levels.append("fault-free")
                xs.append(max(xs, default=30.0) * 2)  # drawn right of the largest MTBF
            pts = [
                (x, per[m][metric])
                for x, m in zip(xs, levels, strict=True)
                if per[m].get(metric) and per[m][metric].get("n")
            ]
            if not pts:
                continue
            med = [p["median"] for _, p in pts]
            ax.errorbar(
                [x for x, _ in pts],
                med,
                yerr=[
                    [m - p["min"] for m, (_, p) in zip(med, pts, strict=True)],
                    [p["max"] - m for m, (_, p) in zip(med, pts, strict=True)],
                ],
                marker="o",
                capsize=3,
                label=s,
                color=COLORS.get(s),
            )
        ax.set_xscale("log")
        ax.set_xticks(ticks, labels)
        ax.minorticks_off()
        ax.set_xlabel("MTBF, s (rightmost point: fault-free)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Goodput under faults (median and range over repetitions)")
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
        strategies = [s for s in ("lamplighter", "ckpt-restart", "poll-10s") if s in per]
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
