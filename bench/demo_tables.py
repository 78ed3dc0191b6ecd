"""The demo tables of docs/results.md, from the demos' result files (bench/results/demo-{local,slurm,bare}.json).

`make demo-results` (bench.demos) runs `make demo`, `make demo-slurm` and
`make demo-bare` once each at one clean commit and keeps their reports; this
prints each as a sentence and a table of its faults. docs/results.md embeds each
between `<!-- demo-report:MODE -->` and `<!-- /demo-report:MODE -->`, and
`make test` checks that it holds what this prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.results_io import GENERATED_NOTE

MODES = {"local": "make demo", "slurm": "make demo-slurm", "bare": "make demo-bare"}
KIND_LABELS = {
    "kill": "kill (SIGKILL)",
    "exception": "exception in the trainer",
    "hang": "hang (SIGSTOP)",
    "gpu": "GPU uncorrectable ECC",
    "lighthouse-kill": "Lighthouse kill",
    "supervisor-kill": "supervisor kill",
    "node-crash": "node crash",
    "host-crash": "host crash",
    "partition": "cut link",
}


def markers(mode: str) -> tuple[str, str]:
    return f"<!-- demo-report:{mode} -->", f"<!-- /demo-report:{mode} -->"


def result_name(mode: str) -> str:
    return f"demo-{mode}"


def _s(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def _target(mode: str, f: dict[str, Any]) -> str:
    group = f.get("target_group", f.get("group"))
    if group is None:
        return "every group"
    before, after = (f.get("node"), f.get("node_after")) if mode == "slurm" else (f.get("host"), f.get("host_after"))
    if before is None:
        return f"group {group}"
    return f"group {group}: {before} -> {after or '-'}"


def fault_rows(mode: str, report: dict[str, Any]) -> list[str]:
    out = [
        "| fault | target | detected | running again | then first commit | survivors' stall | detected as |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in report["faults"]:
        first = _s(f.get("first_commit_after_restart_s"))
        if f.get("warm"):
            first += " (warm standby)"
        label = KIND_LABELS.get(f["kind"], f["kind"])
        out.append(
            f"| {label} | {_target(mode, f)} | {_s(f.get('detection_latency_s'))} | "
            f"+{_s(f.get('restart_after_detection_s'))} | +{first} | {_s(f.get('survivor_stall_s'))} | "
            f"{(f.get('detected_as') or '-').replace('|', '/')} |"
        )
    return out


def headline(mode: str, doc: dict[str, Any]) -> str:
    env, rep = doc["environment"], doc["report"]
    ok = "" if doc["exit_code"] == 0 else f" **It FAILED (exit code {doc['exit_code']}).**"
    settings = f"hang timeout {rep['hang_timeout_s']:g} s" if rep.get("hang_timeout_s") is not None else ""
    text = (
        f"One run of `{MODES[mode]}` by `make demo-results` at commit {env['commit']} ({env['when']}; "
        f"`bench/results/{result_name(mode)}.json`): {len(rep['groups'])} groups, {len(rep['faults'])} faults"
        f"{', ' + settings if settings else ''}.{ok}"
    )
    base = doc.get("baseline")
    if base:
        text += (
            f" Fault-free first: {base['steps_committed']}/{base['target_steps']} steps in {base['wall_s']:.1f} s, "
            f"{base['useful_samples_per_s']:.0f} useful samples/s (the goodput baseline). With its faults:"
        )
    text += (
        f" {rep['steps_committed']}/{rep['target_steps']} steps in {rep['wall_s']:.1f} s, "
        f"**{rep['steps_lost']} steps lost**, weights identical: {rep['weights_identical']} ({rep['weights_check']})"
    )
    if "goodput_vs_fault_free_run" in rep:  # goodput against the run's own steady rate (since 2026-12-02)
        text += f", {rep['useful_samples_per_s']:.0f} useful samples/s"
        if rep.get("goodput") is not None:
            text += f", goodput {rep['goodput']:.2f} against its own steady {rep['steady_samples_per_s']:.0f}"
        if rep.get("goodput_vs_fault_free_run") is not None:
            text += f" ({rep['goodput_vs_fault_free_run']:.2f} against the fault-free run)"
    elif rep.get("goodput") is not None:  # an older report: goodput against the fault-free run first
        text += f", {rep['useful_samples_per_s']:.0f} useful samples/s, goodput {rep['goodput']:.2f}"
    if mode == "slurm":
        drained = rep.get("drained_nodes") or {}
        text += ", drained: " + (", ".join(f"{n} ({why})" for n, why in drained.items()) or "none")
    if mode == "bare":
        text += "".join(_bare_extras(rep))
    return (
        text + ". Seconds after the fault (detected), after detection (running again), after running again "
        "(first commit); the survivors' stall is their longest extra gap between commits:"
    )


def _bare_extras(rep: dict[str, Any]) -> list[str]:
    out = []
    for f in rep["faults"]:
        if f["kind"] == "partition":
            out.append(
                f", the cut host's trainer killed by its own host {_s(f.get('fence_before_start_s'))} s before its "
                f"group started elsewhere (fenced: {rep.get('checks', {}).get('partition_fenced')})"
            )
        if f["kind"] == "host-crash":
            out.append(
                f", the placer role moved from {f.get('placer_before')} to {f.get('placer_after')} "
                f"{_s(f.get('placer_moved_s'))} s after the crash (lease {rep.get('lease_ttl_s')} s)"
            )
    load = rep.get("etcd_load")
    if load:
        out.append(
            f", etcd {load['requests_per_s_per_host']} requests/s per host at a {load['poll_interval_s']:g} s poll"
        )
    return out


def render_mode(results: Path, mode: str) -> str:
    begin, end = markers(mode)
    path = results / f"{result_name(mode)}.json"
    if not path.exists():
        body = [f"No result of `{MODES[mode]}` is kept (`bench/results/{path.name}` is missing): `make demo-results`."]
    else:
        doc = json.loads(path.read_text())
        if not {"environment", "report", "exit_code"} <= doc.keys():
            body = [f"`bench/results/{path.name}` was not written by `make demo-results`: run it."]
        else:
            body = [headline(mode, doc), "", *fault_rows(mode, doc["report"])]
    return "\n".join([begin, GENERATED_NOTE, *body, end])
