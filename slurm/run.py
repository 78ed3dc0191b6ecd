"""The one way lamplighter runs a Slurm command: argv list, hard timeout, errors with context.

Every Slurm CLI call in the project goes through `run_slurm` (or a `SlurmCli`
built on it) so that a hung slurmctld can never hang a supervisor, and every
failure names the command, the exit code and Slurm's own message.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


class SlurmError(RuntimeError):
    """A Slurm command failed or did not finish in time."""

    def __init__(self, argv: list[str], returncode: int | None, stderr: str, timed_out: bool = False) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.timed_out = timed_out
        if timed_out:
            what = "timed out"
        elif returncode is None:
            what = "could not start"
        else:
            what = f"exited {returncode}"
        msg = f"slurm command {' '.join(self.argv)!r} {what}"
        if self.stderr:
            # One line, as every CLI error is: Slurm's tools often say one thing over several lines.
            msg += ": " + "; ".join(line.strip() for line in self.stderr.splitlines() if line.strip())
        super().__init__(msg)


def run_slurm(
    argv: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    slurm_conf: str | None = None,
    input: str | None = None,
) -> str:
    """Run a Slurm command; return its stdout or raise SlurmError.

    `env` is added to this process's environment (not a replacement), and
    `slurm_conf`, when given, sets SLURM_CONF on top of both.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    if slurm_conf is not None:
        full_env["SLURM_CONF"] = slurm_conf
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise SlurmError(argv, None, err, timed_out=True) from e
    except OSError as e:
        raise SlurmError(argv, None, str(e)) from e
    if proc.returncode != 0:
        raise SlurmError(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout


@dataclass(frozen=True)
class SlurmCli:
    """Where the Slurm commands are and which cluster they talk to."""

    slurm_conf: str | None = None
    bin_dir: Path | None = None
    timeout: float = 10.0
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self,
        cmd: str,
        *args: str,
        timeout: float | None = None,
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """`env`: added for this call only (e.g. TZ=UTC for times printed without a zone)."""
        exe = str(self.bin_dir / cmd) if self.bin_dir is not None else cmd
        return run_slurm(
            [exe, *args],
            timeout=self.timeout if timeout is None else timeout,
            env={**self.env, **(env or {})} or None,
            slurm_conf=self.slurm_conf,
            input=input,
        )
