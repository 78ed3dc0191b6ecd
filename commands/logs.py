"""`lamplighter logs JOB`: a job's logs, as Slurm writes them into its run directory.

Each Slurm job of a submission writes one file under `<run_dir>/logs/`:
`g<N>-<jobid>.out` for group N and `lighthouse-<jobid>.out` for the job's
Lighthouse (sbatch --output, open-mode append: the attempts of one Slurm job,
its requeues, follow each other in one file). A group brought back with
`lamplighter revive` runs as a new Slurm job, in a new file. Shown: the
newest file of each group (the Slurm job the submission record names now,
else the highest job id) and of the Lighthouse, each after a header
`==> PATH (group N, Slurm job ID) <==`.

`-f` follows them as `tail -f` does: a line is printed once it is whole, a
new file of a group (a revived one) is taken up from its start, a file that
shrank is read again from its start. It ends on Ctrl-C, and by itself once
the job is over as its run directory tells: the Lighthouse job's release
helper wrote that every group job ended into its log (slurm/submit/release.py), or,
for a job with no Lighthouse job, its `completed` marker is there. Each look
reads at most FOLLOW_CHUNK bytes of a file: a log that grows faster is caught
up over several looks, never read whole into memory.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lamplighter.configs.loader import ConfigError
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, Submission, find_run_dir, load

EXIT_INVALID = 2
LIGHTHOUSE = "lighthouse"
_LOG_NAME = re.compile(r"^(?:g(?P<group>\d+)|lighthouse)-(?P<job>\d+)\.out$")
# What slurm/submit/release.py's helper prints into the Lighthouse job's log once the job is over (its `decide` reason).
JOB_OVER_LINE = "lamplighter release: every group job ended"
FOLLOW_S = 1.0  # how often -f looks at the files
FOLLOW_CHUNK = 1024 * 1024  # at most this much of one file per look
TAIL_BLOCK = 64 * 1024
OVER_TAIL_BYTES = 64 * 1024  # the end of the Lighthouse log looked at for JOB_OVER_LINE


@dataclass(frozen=True)
class LogFile:
    path: Path
    group: int | None  # None: the Lighthouse
    job_id: int

    @property
    def what(self) -> str:
        return LIGHTHOUSE if self.group is None else f"group {self.group}"

    def header(self) -> str:
        return f"==> {self.path} ({self.what}, Slurm job {self.job_id}) <=="


def log_files(logs: Path) -> list[LogFile]:
    """Every Slurm log of the job's folder (other files there are not Slurm's: left out)."""
    try:
        names = sorted(os.listdir(logs))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _LOG_NAME.match(name)
        if m:
            group = m.group("group")
            out.append(LogFile(logs / name, None if group is None else int(group), int(m.group("job"))))
    return out


def newest(files: Iterable[LogFile], current: dict[int | None, int]) -> dict[int | None, LogFile]:
    """Per group (None: the Lighthouse) its newest file: the Slurm job the record names now, else the highest id."""
    out: dict[int | None, LogFile] = {}
    for f in files:
        best, now = out.get(f.group), current.get(f.group)
        if best is None or (best.job_id != now and (f.job_id == now or f.job_id > best.job_id)):
            out[f.group] = f
    return out


def current_jobs(sub: Submission | None) -> dict[int | None, int]:
    if sub is None:
        return {}
    out: dict[int | None, int] = {g: j for g, j in sub.groups.items()}
    if sub.lighthouse_job_id is not None:
        out[None] = sub.lighthouse_job_id
    return out


def chosen(run_dir: Path, sub: Submission | None, groups: list[int], lighthouse: bool) -> list[LogFile]:
    """The files to show: the asked groups (none asked and no --lighthouse: every group) and the Lighthouse."""
    best = newest(log_files(RunPaths(run_dir).logs()), current_jobs(sub))
    everything = not groups and not lighthouse
    keys: list[int | None] = [*sorted(k for k in best if k is not None)] if everything else [*sorted(groups)]
    if everything or lighthouse:
        keys.append(None)
    return [best[k] for k in keys if k in best]


def tail_start(path: Path, lines: int) -> int:
    """The offset where the last `lines` lines of the file begin (reading blocks from its end only)."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        pos, seen = end, 0
        # A last line without its newline counts as a line; the newline ending the file starts none.
        while pos > 0:
            step = min(TAIL_BLOCK, pos)
            f.seek(pos - step)
            block = f.read(step)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 0x0A and pos - step + i != end - 1:
                    seen += 1
                    if seen == lines:
                        return pos - step + i + 1
            pos -= step
        return 0


def copy_out(path: Path, start: int, out: TextIO, limit: int | None = None) -> int:
    """Write the file from `start` (at most `limit` bytes, cut after the last whole line); the offset reached."""
    with open(path, "rb") as f:
        f.seek(start)
        if limit is None:
            while chunk := f.read(TAIL_BLOCK):
                out.write(chunk.decode(errors="replace"))
                start += len(chunk)
            return start
        data = f.read(limit)
    whole = data.rfind(b"\n") + 1
    if whole == 0 and len(data) == limit:  # one line longer than a chunk: give it out in pieces
        whole = len(data)
    out.write(data[:whole].decode(errors="replace"))
    return start + whole


def job_over(run_dir: Path, sub: Submission | None) -> str | None:
    """Why the job is over, from its run directory alone; None while it may still run."""
    if sub is not None and sub.lighthouse_job_id is not None:
        log = RunPaths(run_dir).logs() / f"{LIGHTHOUSE}-{sub.lighthouse_job_id}.out"
        try:
            with open(log, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - OVER_TAIL_BYTES))
                if JOB_OVER_LINE.encode() in f.read():
                    return f"every group job ended ({log.name} says so)"
        except FileNotFoundError:
            pass
        return None
    return "it reached its target (completed)" if RunPaths(run_dir).completed().exists() else None


class Follower:
    """What `-f` has printed of each file; `look` prints what each file gained since."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.offsets: dict[Path, int] = {}
        self.shown: Path | None = None  # the file the last lines printed were from

    def start(self, f: LogFile, offset: int) -> None:
        self.offsets[f.path] = offset
        self.shown = f.path

    def look(self, files: list[LogFile]) -> bool:
        """Print the new whole lines of each file (a file not seen before: from its start); True if any."""
        grew = False
        for f in files:
            try:
                size = f.path.stat().st_size
            except FileNotFoundError:
                continue
            at = self.offsets.get(f.path, 0)
            if size < at:
                self.out.write(f"lamplighter logs: {f.path} shrank: reading it from its start\n")
                at = 0
            if size == at:
                self.offsets[f.path] = at
                continue
            if self.shown != f.path:
                self.out.write(("\n" if self.shown is not None else "") + f.header() + "\n")
                self.shown = f.path
            reached = copy_out(f.path, at, self.out, FOLLOW_CHUNK)
            grew = grew or reached > at
            self.offsets[f.path] = reached
        self.out.flush()
        return grew


def show(files: list[LogFile], tail: int | None, out: TextIO) -> dict[Path, int]:
    """Each file after its header (its last `tail` lines, else all of it); the offset each was shown up to."""
    reached: dict[Path, int] = {}
    for i, f in enumerate(files):
        out.write(("\n" if i else "") + f.header() + "\n")
        start = 0 if tail is None else f.path.stat().st_size if tail == 0 else tail_start(f.path, tail)
        end = copy_out(f.path, start, out)
        reached[f.path] = end
        if end > start:
            with open(f.path, "rb") as fh:
                fh.seek(end - 1)
                if fh.read(1) != b"\n":
                    out.write("\n")
    out.flush()
    return reached


def follow(
    run_dir: Path,
    sub: Submission | None,
    groups: list[int],
    lighthouse: bool,
    shown: dict[Path, int],
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
    reload: Callable[[], Submission | None] | None = None,
) -> str:
    """Print what the files gain until the job is over (returned: why); Ctrl-C ends it too (KeyboardInterrupt).

    `reload` re-reads the submission record (a revived group's new Slurm job); `sleep` waits between looks."""
    fol = Follower(out)
    files = chosen(run_dir, sub, groups, lighthouse)
    for f in files:
        fol.start(f, shown.get(f.path, 0))
    while True:
        over = job_over(run_dir, sub)
        if reload is not None:
            sub = reload() or sub
        files = chosen(run_dir, sub, groups, lighthouse)
        grew = fol.look(files)
        if over is not None and not grew:  # what was written before the end is all printed
            return over
        sleep(FOLLOW_S)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "logs",
        help="a job's logs: the newest Slurm log of each group and of its Lighthouse (-f: follow them)",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  lamplighter logs llama3-8b                    every group's newest log, then the Lighthouse's\n"
        "  lamplighter logs llama3-8b --group 2 --tail 50\n"
        "  lamplighter logs llama3-8b --group 0 --group 1 -f\n"
        "  lamplighter logs runs/llama3-8b --lighthouse\n\n"
        "exit status: 0 shown (a group whose job has not started yet has no log: said on stderr);\n"
        "2 bad input (no such job, no such group, --tail below 0)",
    )
    p.add_argument(
        "job",
        metavar="JOB",
        help="job name (as submitted by you, in $LAMPLIGHTER_RUNS, or runs/<name>), run directory, or config file",
    )
    p.add_argument("--run-dir", default=None, help="the job's run directory (holds submission.json)")
    p.add_argument(
        "--group",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="only group N's log (repeatable; with --lighthouse, the Lighthouse's too)",
    )
    p.add_argument("--lighthouse", action="store_true", help="the Lighthouse job's log (alone, unless --group)")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines of each file")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing what the logs gain until Ctrl-C, or until the job is over",
    )
    p.set_defaults(func=run_logs)


def _error(msg: str) -> int:
    print(f"lamplighter logs: error: {msg}", file=sys.stderr)
    return EXIT_INVALID


def run_logs(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    if args.tail is not None and args.tail < 0:
        return _error(f"--tail {args.tail}: give 0 or more lines")
    try:
        run_dir = find_run_dir(args.job, args.run_dir)
    except (ConfigError, OSError) as e:
        return _error(str(e))
    if not run_dir.is_dir():
        return _error(f"no run directory at {run_dir}: give --run-dir")
    sub: Submission | None = None
    if (run_dir / SUBMISSION_FILE).exists():
        try:
            sub = load(run_dir)
        except ValueError as e:
            print(f"lamplighter logs: warning: {e}; showing the newest log of each group", file=sys.stderr)
    if sub is not None:
        unknown = sorted(set(args.group) - set(sub.groups))
        if unknown:
            have = ", ".join(str(g) for g in sorted(sub.groups)) or "none"
            return _error(f"job {sub.job} has no group {unknown[0]} (its groups: {have})")
    elif any(g < 0 for g in args.group):
        return _error(f"--group {min(args.group)}: groups are numbered from 0")
    files = chosen(run_dir, sub, args.group, args.lighthouse)
    _say_missing(run_dir, sub, files, args.group, args.lighthouse)
    shown = show(files, args.tail, sys.stdout)
    if not args.follow:
        return 0

    def reload() -> Submission | None:
        try:
            return load(run_dir)
        except (OSError, ValueError):
            return None

    try:
        why = follow(run_dir, sub, args.group, args.lighthouse, shown, sys.stdout, sleep, reload)
    except KeyboardInterrupt:
        return 0
    print(f"lamplighter logs: the job is over: {why}", file=sys.stderr)
    return 0


def _say_missing(
    run_dir: Path, sub: Submission | None, files: list[LogFile], groups: list[int], lighthouse: bool
) -> None:
    """On stderr: each asked-for log that is not there yet (its Slurm job has not started)."""
    logs = RunPaths(run_dir).logs()
    if not files and sub is None:
        print(f"lamplighter logs: no Slurm log in {logs} yet", file=sys.stderr)
        return
    current = current_jobs(sub)
    wanted: list[int | None] = list(groups) if groups or lighthouse else [k for k in current if k is not None]
    if lighthouse or (not groups and None in current):
        wanted.append(None)
    have = {f.group for f in files}
    for k in wanted:
        if k in have:
            continue
        what, stem = (LIGHTHOUSE, LIGHTHOUSE) if k is None else (f"group {k}", f"g{k}")
        where = f"Slurm job {current[k]} writes {logs}/{stem}-{current[k]}.out" if k in current else f"none in {logs}"
        print(f"lamplighter logs: {what}: no log yet ({where} once it starts)", file=sys.stderr)
