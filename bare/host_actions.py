"""A bare-metal host's action lines: its own log as root, and each job's run directory as the job's account.

The line is rundir/actions.py's, the one every supervisor writes (`lamplighter why` reads it). Root writes
only its own state directory; a job's run directory is written by a child that became the job's account
(user_launch.append_as). A log that cannot be written is said once and skipped: no action fails for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from lamplighter.bare.accounts import Account
from lamplighter.bare.user_launch import append_as
from lamplighter.rundir.actions import ACTIONS_FILE, append_line

log = logging.getLogger(__name__)


@dataclass
class HostActions:
    me: str
    state_dir: Path
    daemon_uid: int
    _failed: set[Path] = field(default_factory=set)

    def append(self, line: str, run_dirs: set[tuple[Path, Account | None]]) -> None:
        """The line in this host's log, and in each of these run directories as its account (None: a job with
        no account of its own here, whose files are this daemon's)."""
        targets: list[tuple[Path, Account | None]] = [(self.state_dir / ACTIONS_FILE, None)]
        targets += sorted(((d / ACTIONS_FILE, a) for d, a in run_dirs), key=lambda t: str(t[0]))
        for path, account in targets:
            try:
                if account is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    append_line(path, line)
                else:
                    append_as(account, self.daemon_uid, path.parent, path.name, line)
                self._failed.discard(path)
            except OSError as e:
                if path not in self._failed:
                    log.warning("%s: cannot append the action to %s: %s", self.me, path, e)
                    self._failed.add(path)
