"""The few lines printed at the end of `lamplighter local`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lamplighter.report.build import run_ok


def _s(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}s"


def _goodput_line(report: dict[str, Any]) -> str:
    useful = f"useful {report.get('useful_samples_per_s') or 0:.0f} samples/s"
    steady = report.get("steady") or {}
    if report["goodput"] is None:
        line = f"{useful}, goodput - ({steady.get('why_none') or 'no steady stretch to measure the rate by'})"
    else:
        line = (
            f"{useful}, goodput {report['goodput']:.2f} (against this run's steady "
            f"{report['steady_samples_per_s']:.0f} samples/s over {steady.get('steady_s', 0):.0f} s "
            f"in {steady.get('windows', 0)} windows)"
        )
    if report.get("goodput_vs_fault_free_run") is not None:
        line += (
            f"; {report['goodput_vs_fault_free_run']:.2f} against the fault-free "
            f"{report['fault_free_samples_per_s']:.0f} ({report['fault_free_source']})"
        )
    return line


def _chaos_lines(report: dict[str, Any]) -> list[str]:
    """Faults planned within the run and what became of them; a random plan has nothing beyond the run."""
    if not report.get("chaos_plan"):
        return []
    missed = report.get("chaos_missed") or []
    line = (
        f"chaos: {report['chaos_planned']} faults planned within the run, {report['chaos_struck']} struck, "
        f"{len(missed)} hit nothing"
    )
    if report.get("chaos_not_injected"):
        line += f", {report['chaos_not_injected']} due but not fired before the job ended"
    out = [line]
    out += [f"planned {m['kind']} at {m['planned_at_s']:g} s hit nothing: {m['why']}" for m in missed]
    if report.get("chaos_after_end"):
        out.append(f"{report['chaos_after_end']} scheduled faults fell after the job ended")
    return out


def _own_count(report: dict[str, Any]) -> str:
    own = report.get("trainer_steps")
    if own is None or own == report["steps_committed"]:
        return ""
    return f" (the trainer's own count: {own}/{report['target_steps']}; torchft counts only committed steps)"


def summary_text(report: dict[str, Any], report_dir: Path) -> str:
    ok = run_ok(report)
    lines = [
        "",
        f"== lamplighter local: {report.get('job', '')} {'OK' if ok else 'FAILED'} in {report['wall_s']:.1f} s ==",
        f"steps committed {report['steps_committed']}/{report['target_steps']}{_own_count(report)}   "
        f"steps lost {report['steps_lost']}   "
        f"weights identical {report['weights_identical']} ({report['weights_check']})",
        _goodput_line(report),
    ]
    if (report.get("goodput_vs_fault_free_run") or 0) > 1:
        lines.append(
            "WARNING: faster than the fault-free run: that run was measured under other load (2 cores shared?); "
            "the goodput against this run's own steady rate does not depend on it"
        )
    if report["faults"]:
        lines.append(f"{'fault':<16}{'target':<12}{'detected':>10}{'restarted':>11}{'1st commit':>12}{'stall':>9}")
        for f in report["faults"]:
            target = "lighthouse" if f["group"] is None else f"group {f['group']}"
            lines.append(
                f"{f['kind']:<16}{target:<12}{_s(f['detection_latency_s']):>10}{_s(f['restart_after_detection_s']):>11}"
                f"{_s(f['first_commit_after_restart_s']):>12}{_s(f['survivor_stall_s']):>9}"
                + ("  (warm standby)" if f.get("warm") else "")
            )
        lines.append(
            "  (detected: after injection; restarted: after detection; 1st commit: after restart; "
            "stall: survivors' longest extra gap)"
        )
    for g, st in report.get("group_status", {}).items():
        if st["status"] == "given_up":
            lines.append(f"group {g} GIVEN UP: {st['reason']}")
    lines += _chaos_lines(report)
    lines.append(f"report: {report_dir / 'report.json'}   timeline: {report.get('timeline') or '-'}")
    return "\n".join(lines)
