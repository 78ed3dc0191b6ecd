"""A job's trainers start, and its action lines are written, as the job's account: root opens nothing of it.

Each rank runs under `setpriv` (util-linux) with the account's uid, gid and groups, no capabilities (its
inheritable, ambient and bounding sets cleared), no_new_privs (no setuid program gives any back) and SIGKILL
when the host daemon dies (set after the switch: a change of user clears it). Then a shell, already that
user, creates the run directory's logs folder, opens the log, writes the job's config there (job.json, as
on Slurm), enters the run directory and execs the trainer: a path the spec names is opened with the
account's rights only, never followed as root. An action line for the run directory is appended the same
way, by a short-lived shell of that user. (A host daemon that is not root starts its trainers as itself:
only no_new_privs and the death signal.)

Every value reaches the shell as an argument or in the environment, never inside its script.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from lamplighter.bare.accounts import Account
from lamplighter.system.process_tree import StartError

SH = "/bin/sh"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TZ")  # of the daemon's environment; nothing else of root's
JOB_JSON_ENV = "LAMPLIGHTER_JOB_JSON"

# $1 run dir, $2 log, $3 config path, $4 a name unique to this rank and host (the config's temporary file).
OPEN_AS_USER = r"""
run=$1 log=$2 config=$3 tag=$4
shift 4
mkdir -p -- "${log%/*}" || exit 126
exec >>"$log" 2>&1
printf '%s\n' "$LAMPLIGHTER_JOB_JSON" >"$config.$tag.tmp" && mv -f -- "$config.$tag.tmp" "$config" || exit 126
unset LAMPLIGHTER_JOB_JSON
cd -- "$run" || exit 126
exec "$@"
"""

# $1 run dir, $2 file name, $3 the line.
APPEND_AS_USER = r"""
umask 022
mkdir -p -- "$1" && printf '%s\n' "$3" >>"$1/$2"
"""


def setpriv_argv(account: Account, daemon_uid: int, setpriv: str) -> list[str]:
    """setpriv's part of a trainer's argv (then `--` and the command)."""
    if daemon_uid != 0:  # not root: it can only be itself (accounts.py refused any other account)
        return [setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--pdeathsig=KILL", "--"]
    groups = f"--groups={','.join(str(g) for g in account.groups)}" if account.groups else "--clear-groups"
    return [
        setpriv,
        f"--reuid={account.uid}",
        f"--regid={account.gid}",
        groups,
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--pdeathsig=KILL",
        "--",
    ]


def base_env(account: Account, daemon_env: Mapping[str, str]) -> dict[str, str]:
    """The environment a trainer starts from: the account's own names, a PATH, nothing else of the daemon's."""
    env = {k: daemon_env[k] for k in PASSED_ON if k in daemon_env}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(HOME=account.home, USER=account.name, LOGNAME=account.name)
    return env


def trainer_argv(
    account: Account, daemon_uid: int, run_dir: Path, log: Path, config: Path, tag: str, command: Sequence[str]
) -> list[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise StartError("setpriv (util-linux) is missing: trainers cannot start as their user, without root")
    return [
        *setpriv_argv(account, daemon_uid, setpriv),
        SH,
        "-c",
        OPEN_AS_USER,
        "lamplighter-trainer",
        str(run_dir),
        str(log),
        str(config),
        tag,
        *command,
    ]


def start_ranks(
    argv: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]], job_json: str
) -> list[subprocess.Popen[bytes]]:
    """One process per rank (argv from trainer_argv), each leading a session of its own (process_tree.py
    kills them by it). Until the shell has opened the log, its errors go to the daemon's own stderr."""
    popens: list[subprocess.Popen[bytes]] = []
    for rank, (args, env) in enumerate(zip(argv, envs, strict=True)):
        try:
            p = subprocess.Popen(
                list(args),
                env={**env, JOB_JSON_ENV: job_json},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                cwd="/",
            )
        except OSError as e:
            for q in popens:
                q.kill()
                q.wait()
            raise StartError(f"rank {rank}: cannot start {list(args)!r}: {e}") from e
        popens.append(p)
    return popens


def append_as(account: Account, daemon_uid: int, run_dir: Path, name: str, line: str, timeout_s: float = 5.0) -> None:
    """Append one line to `<run_dir>/<name>` as the account (one write of the whole line); OSError if not."""
    root = daemon_uid == 0  # else it is that account already (accounts.py)
    try:
        out = subprocess.run(
            [SH, "-c", APPEND_AS_USER, "lamplighter-append", str(run_dir), name, line.rstrip("\n")],
            env={"PATH": DEFAULT_PATH},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            cwd="/",
            check=False,
            user=account.uid if root else None,
            group=account.gid if root else None,
            extra_groups=list(account.groups) if root else None,
        )
    except subprocess.TimeoutExpired as e:
        raise OSError(f"appending to {run_dir / name} as {account.name}: no answer within {timeout_s:g} s") from e
    if out.returncode != 0:
        why = out.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(f"appending to {run_dir / name} as {account.name}: {why[-1] if why else out.returncode}")
