"""Pure parsers of Slurm's text output (sbatch, squeue, scontrol), tested on recorded real output.

scontrol prints `Key=Value` pairs separated by spaces, yet some values hold
spaces themselves (`Reason=ReqNodeNotAvail, UnavailableNodes:n1`, a node's
`Reason=... [root@2026-...]`, `OS=Linux ...`, `Comment=...`). The rule used
here: a new pair starts only at whitespace followed by `Key=` where Key looks
like a Slurm key (a capitalised identifier). In the multi-line form, keys
that own a whole line (Reason, Comment, OS, Command, WorkDir, Std*) take the
rest of the line verbatim, so free text is exact there. In the `-o` one-line
form, free text that itself contains ` Word=` cannot be told apart from a new
key; no parser can, so callers that need exact free text use the multi-line form.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

# A pair starts at line start or after whitespace with a capitalised key.
_KEY_AT = re.compile(r"(?:(?<=\s)|^)([A-Z][A-Za-z0-9_:/]*)=")
# Keys whose value is the rest of their line in scontrol's multi-line output.
_LINE_KEYS = (
    "Reason",
    "Comment",
    "AdminComment",
    "SystemComment",
    "OS",
    "Command",
    "WorkDir",
    "StdErr",
    "StdIn",
    "StdOut",
    "Power",
    "Extra",
)
# squeue field separator: ASCII unit separator, which no job name or reason contains.
SQUEUE_SEP = "\x1f"
# squeue's reason for a job whose batch launch failed: Slurm requeued it and holds it until released
# (scontrol writes it with underscores).
LAUNCH_FAILED_HELD = "launch failed requeued held"
SQUEUE_FORMAT = SQUEUE_SEP.join(["%i", "%j", "%T", "%r", "%N", "%u"])


class ParseError(ValueError):
    """Slurm printed something the parser does not understand; carries the text."""

    def __init__(self, what: str, text: str) -> None:
        super().__init__(f"cannot parse {what}: {text[:500]!r}")
        self.text = text


def parse_sbatch_parsable(out: str) -> int:
    """Job id from `sbatch --parsable` output: `1234` or `1234;cluster`."""
    line = out.strip().splitlines()[-1] if out.strip() else ""
    m = re.fullmatch(r"(\d+)(;\S+)?", line.strip())
    if not m:
        raise ParseError("sbatch --parsable output", out)
    return int(m.group(1))


def split_pairs(text: str) -> dict[str, str]:
    """`Key=Value Key2=Value with spaces` -> dict; a value runs until the next `Key=`."""
    out: dict[str, str] = {}
    matches = list(_KEY_AT.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[m.group(1)] = text[m.end() : end].strip()
    return out


def parse_record(block: str) -> dict[str, str]:
    """One scontrol record (multi-line or `-o` one-line) into its Key=Value pairs."""
    out: dict[str, str] = {}
    for line in block.splitlines():
        s = line.strip()
        if not s:
            continue
        key = s.split("=", 1)[0]
        if "\n" not in block.strip() or key not in _LINE_KEYS:
            out.update(split_pairs(s))
        else:
            out[key] = s.split("=", 1)[1].strip()
    return out


def split_records(text: str, first_key: str) -> list[str]:
    """Split scontrol output of several objects into one block per object."""
    blocks: list[str] = []
    for line in text.splitlines():
        if line.startswith(first_key + "="):
            blocks.append(line)
        elif blocks and line.strip():
            blocks[-1] += "\n" + line
    return blocks


def _int_or_none(v: str | None) -> int | None:
    return int(v) if v is not None and re.fullmatch(r"-?\d+", v) else None


def _none_if_null(v: str | None) -> str | None:
    return None if v in (None, "", "(null)", "None", "Unknown", "N/A", "n/a") else v


@dataclass(frozen=True)
class JobInfo:
    """A job as `scontrol show job` reports it; `fields` keeps every pair."""

    job_id: int
    name: str
    state: str
    reason: str | None
    restarts: int
    batch_host: str | None
    node_list: str | None
    start_time: str | None
    requeue: bool
    exit_code: str | None
    fields: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def user_id(self) -> int | None:
        """The job's owner: scontrol's `UserId=alice(1001)`, squeue's `1001`."""
        m = re.fullmatch(r"(?:.*\()?(\d+)\)?", self.fields.get("UserId", ""))
        return int(m.group(1)) if m else None

    @property
    def start_epoch(self) -> float | None:
        """StartTime as epoch seconds, for output printed in UTC (`jobs_by_id` runs squeue with TZ=UTC)."""
        return utc_epoch(self.start_time)

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


def job_from_fields(f: dict[str, str]) -> JobInfo:
    if "JobId" not in f or "JobState" not in f:
        raise ParseError("scontrol job record", " ".join(f"{k}={v}" for k, v in f.items()))
    return JobInfo(
        job_id=int(f["JobId"]),
        name=f.get("JobName", ""),
        state=f["JobState"],
        reason=_none_if_null(f.get("Reason")),
        restarts=_int_or_none(f.get("Restarts")) or 0,
        batch_host=_none_if_null(f.get("BatchHost")),
        node_list=_none_if_null(f.get("NodeList")),
        start_time=_none_if_null(f.get("StartTime")),
        requeue=f.get("Requeue") == "1",
        exit_code=_none_if_null(f.get("ExitCode")),
        fields=f,
    )


def utc_epoch(stamp: str | None) -> float | None:
    """`2026-11-27T00:33:14` printed in UTC -> epoch seconds; None for Unknown, N/A, None."""
    if not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


# `squeue -O` fields of `jobs_by_id`, each ended by SQUEUE_SEP. No field a user writes (name, comment, work
# dir): a job name can hold a line break and with it a forged line about another job.
JOB_FIELDS = (
    ("JobID", "JobId"),
    ("State", "JobState"),
    ("UserID", "UserId"),
    ("NodeList", "NodeList"),
    ("StartTime", "StartTime"),
    ("RestartCnt", "Restarts"),
    ("BatchHost", "BatchHost"),
)
JOBS_FORMAT = ",".join(f"{name}:0{SQUEUE_SEP}" for name, _ in JOB_FIELDS)


# The head's one read of the queue (`SlurmActions.all_jobs`): JOB_FIELDS and the three a queue line needs. The
# name, which its owner writes and which may hold a line break or SQUEUE_SEP, comes last and is ended by a
# mark drawn at random for each query: no name written before the query holds it, so no name can end a
# record early or forge another job's.
ALL_JOB_FIELDS = (*JOB_FIELDS, ("Reason", "Reason"), ("UserName", "UserName"), ("Name", "JobName"))


def all_jobs_format(mark: str) -> str:
    """`squeue -O` fields, each ended by SQUEUE_SEP, the last (the name) by `mark` (no digit first: squeue
    would read it as the field's width)."""
    if not mark or mark[0].isdigit() or "," in mark or SQUEUE_SEP in mark:
        raise ValueError(f"{mark!r} cannot end a squeue -O field")
    *head, (name, _) = ALL_JOB_FIELDS
    return ",".join([*(f"{f}:0{SQUEUE_SEP}" for f, _ in head), f"{name}:0{mark}"])


def parse_all_jobs(text: str, mark: str) -> tuple[list[JobInfo], list[str]]:
    """`squeue --noheader --states=all -O all_jobs_format(mark)` -> (the jobs, the records it could not read).
    A record it cannot read costs only itself: its job is left out and its text returned."""
    records = text.split(mark + "\n")
    if records[-1].strip():
        raise ParseError("squeue -O output (not ended by its mark)", text)
    jobs: list[JobInfo] = []
    bad: list[str] = []
    seen: set[int] = set()
    for rec in records[:-1]:
        parts = rec.split(SQUEUE_SEP, len(ALL_JOB_FIELDS) - 1)  # the name, last, may hold the separator
        f = {key: v if key == "JobName" else v.strip() for (_, key), v in zip(ALL_JOB_FIELDS, parts, strict=False)}
        if len(parts) != len(ALL_JOB_FIELDS) or not f["JobId"].isdigit() or int(f["JobId"]) in seen:
            bad.append(rec)
            continue
        info = job_from_fields(f)
        seen.add(info.job_id)
        jobs.append(info)
    return jobs, bad


def parse_squeue_jobs(text: str, asked: Iterable[int]) -> dict[int, JobInfo]:
    """`squeue --noheader --states=all -j IDS -O JOBS_FORMAT` -> the jobs asked for (a job Slurm forgot is absent)."""
    want = set(asked)
    out: dict[int, JobInfo] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SQUEUE_SEP)
        if len(parts) != len(JOB_FIELDS) + 1 or parts[-1].strip() or not parts[0].strip().isdigit():
            raise ParseError("squeue -O line", line)
        f = {key: v.strip() for (_, key), v in zip(JOB_FIELDS, parts, strict=False)}
        info = job_from_fields(f)
        if info.job_id not in want or info.job_id in out:
            raise ParseError(f"squeue -O output (job {info.job_id} not asked for, or twice)", text)
        out[info.job_id] = info
    return out


def parse_scontrol_jobs(text: str) -> list[JobInfo]:
    """`scontrol [-o] show job [J]` -> jobs (empty for 'No jobs in the system')."""
    return [job_from_fields(parse_record(b)) for b in split_records(text, "JobId")]


def parse_scontrol_job(text: str) -> JobInfo:
    jobs = parse_scontrol_jobs(text)
    if len(jobs) != 1:
        raise ParseError(f"one job (found {len(jobs)})", text)
    return jobs[0]


@dataclass(frozen=True)
class NodeInfo:
    """A node as `scontrol show node` reports it.

    state is Slurm's text, e.g. `IDLE+DRAIN`, `DOWN*`, `MIXED+DRAIN`; base is
    the part before `+`/`*`, flags the `+` parts, not_responding the `*`.
    """

    name: str
    state: str
    base: str
    flags: frozenset[str]
    not_responding: bool
    reason: str | None
    reason_user: str | None
    reason_time: str | None
    fields: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_down(self) -> bool:
        return self.base == "DOWN" or "DOWN" in self.flags

    @property
    def is_drained(self) -> bool:
        """Drained or draining: takes no new jobs."""
        return "DRAIN" in self.flags or self.base in ("DRAINED", "DRAINING")

    @property
    def registered(self) -> bool:
        """Its slurmd has registered and answers (not UNKNOWN, not `*`)."""
        return self.base != "UNKNOWN" and not self.not_responding and "NOT_RESPONDING" not in self.flags

    @property
    def available(self) -> bool:
        """Can take new jobs."""
        return self.registered and not self.is_down and not self.is_drained and "FAIL" not in self.flags


_REASON_TAIL = re.compile(r"^(.*?)\s*\[([^\[\]@]+)@([^\[\]]+)\]$", re.S)


def split_state(state: str) -> tuple[str, frozenset[str], bool]:
    """`IDLE+DRAIN` -> ('IDLE', {'DRAIN'}, False); `DOWN*` -> ('DOWN', {}, True)."""
    star = "*" in state
    parts = state.replace("*", "").split("+")
    return parts[0], frozenset(p for p in parts[1:] if p), star


def node_from_fields(f: dict[str, str]) -> NodeInfo:
    if "NodeName" not in f or "State" not in f:
        raise ParseError("scontrol node record", " ".join(f"{k}={v}" for k, v in f.items()))
    base, flags, star = split_state(f["State"])
    reason, user, when = _none_if_null(f.get("Reason")), None, None
    if reason:
        m = _REASON_TAIL.match(reason)
        if m:
            reason, user, when = m.group(1), m.group(2), m.group(3)
    return NodeInfo(f["NodeName"], f["State"], base, flags, star, reason, user, when, fields=f)


def parse_scontrol_nodes(text: str) -> list[NodeInfo]:
    """`scontrol [-o] show node[s] [X]` -> nodes."""
    return [node_from_fields(parse_record(b)) for b in split_records(text, "NodeName")]


def parse_scontrol_node(text: str) -> NodeInfo:
    nodes = parse_scontrol_nodes(text)
    if len(nodes) != 1:
        raise ParseError(f"one node (found {len(nodes)})", text)
    return nodes[0]


@dataclass(frozen=True)
class QueueEntry:
    """One line of `squeue --noheader -o SQUEUE_FORMAT` (or a job of `parse_all_jobs`: `queue_entry`)."""

    job_id: int
    name: str
    state: str
    reason: str | None
    nodes: str | None
    user: str


def queue_entry(info: JobInfo) -> QueueEntry:
    return QueueEntry(info.job_id, info.name, info.state, info.reason, info.node_list, info.fields.get("UserName", ""))


def parse_squeue(text: str) -> list[QueueEntry]:
    out: list[QueueEntry] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SQUEUE_SEP)
        if len(parts) != 6 or not parts[0].strip().isdigit():
            raise ParseError("squeue line", line)
        jid, name, state, reason, nodes, user = (p.strip() for p in parts)
        out.append(QueueEntry(int(jid), name, state, _none_if_null(reason), nodes or None, user))
    return out


_SDIAG_AT = re.compile(r"^\s*sdiag output at .*\((\d+)\)\s*$", re.M)


def parse_sdiag_time(text: str) -> int:
    """slurmctld's clock, from `sdiag`'s first line (`sdiag output at Sat Dec 05 07:28:26 2026 (1796455706)`)."""
    m = _SDIAG_AT.search(text)
    if m is None:
        raise ParseError("sdiag output", text[:200])
    return int(m.group(1))


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config`: its `Key = Value` lines (the header and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    max_time: str  # as scontrol prints it: UNLIMITED, or [D-]HH:MM:SS
    default: bool


def parse_scontrol_partitions(text: str) -> list[PartitionInfo]:
    """`scontrol show partition`: one record per partition."""
    out = []
    for block in split_records(text, "PartitionName"):
        f = parse_record(block)
        out.append(PartitionInfo(f["PartitionName"], f.get("MaxTime", "UNLIMITED"), f.get("Default") == "YES"))
    return out
