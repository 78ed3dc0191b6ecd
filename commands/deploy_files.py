"""`lamplighter deploy-files --out DIR`: the files an admin installs beside the package, written out from it.

The wheel carries them as package data (lamplighter/deploy is a link to the
repository's deploy/), so a node installed with `pip install lamplighter`
has the units, the Slurm wrappers, the dashboard and the alert rules of the
very version it runs, without a checkout. Nothing is installed by this
command: it writes the files into DIR and says where each one goes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

EXIT_FAILED = 1
EXIT_INVALID = 2


@dataclass(frozen=True)
class DeployFile:
    path: str  # under the package's deploy/ (or configs/ for the example node configs)
    mode: int
    goes_to: str
    what: str
    package: str = "lamplighter.deploy"

    def source(self) -> Traversable:
        if self.package == "lamplighter.deploy":
            return resources.files("lamplighter").joinpath("deploy", *self.path.split("/"))
        return resources.files(self.package).joinpath(*self.path.split("/"))

    @property
    def out_name(self) -> str:
        return self.path if self.package == "lamplighter.deploy" else f"etc/{self.path}"


FILES: tuple[DeployFile, ...] = (
    DeployFile("systemd/lamplighter-node.service", 0o644, "/etc/systemd/system/", "the node daemon (compute nodes)"),
    DeployFile("systemd/lamplighter-head.service", 0o644, "/etc/systemd/system/", "the head daemon (the head node)"),
    DeployFile("slurm/lamplighter-healthcheck", 0o755, "/usr/local/sbin/", "slurm.conf HealthCheckProgram="),
    DeployFile("slurm/lamplighter-prolog", 0o755, "/usr/local/sbin/", "slurm.conf Prolog="),
    DeployFile("grafana/lamplighter.json", 0o644, "Grafana: Dashboards -> Import", "the dashboard"),
    DeployFile(
        "prometheus/lamplighter-alerts.yml", 0o644, "Prometheus: rule_files (promtool check rules)", "alert rules"
    ),
    DeployFile("RUNBOOK.md", 0o644, "/usr/share/doc/lamplighter/ (the alerts' runbook_url)", "the alerts' runbook"),
    DeployFile("node.yaml", 0o640, "/etc/lamplighter/node.yaml", "a compute node's config", "lamplighter.configs"),
    DeployFile("head.yaml", 0o640, "/etc/lamplighter/head.yaml", "the head node's config", "lamplighter.configs"),
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "deploy-files",
        help="write the systemd units, Slurm wrappers, Grafana dashboard and alert rules of this version to a folder",
        description=(__doc__ or "")
        + "\nfiles:\n"
        + "\n".join(f"  {f.out_name:<36} {f.what}: {f.goes_to}" for f in FILES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter deploy-files --out /tmp/lamplighter-deploy\n"
        "  install -m 0644 /tmp/lamplighter-deploy/systemd/lamplighter-node.service /etc/systemd/system/\n"
        "  lamplighter deploy-files --out ./deploy --force     # overwrite an earlier copy\n\n"
        "deploy/README.md (in the repository) explains each step: privileges, paths, upgrades.\n"
        "exit status: 0 written, 1 could not write, 2 bad input (a file exists: --force)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write into (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist there")
    p.set_defaults(func=run)


def write_all(out: Path, force: bool) -> list[Path]:
    """Write every file under `out`; refuses (FileExistsError) before writing anything if one exists."""
    targets = [(f, out / f.out_name) for f in FILES]
    existing = [str(t) for _, t in targets if t.exists()]
    if existing and not force:
        raise FileExistsError(f"already there: {', '.join(existing)}; give --force to overwrite")
    for f, target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.source().read_bytes())
        target.chmod(f.mode)
    return [t for _, t in targets]


def run(args: argparse.Namespace) -> int:
    try:
        write_all(args.out, args.force)
    except FileExistsError as e:
        print(f"lamplighter deploy-files: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        print(f"lamplighter deploy-files: error: cannot write into {args.out}: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {len(FILES)} files into {args.out}:")
    for f in FILES:
        print(f"  {f.out_name:<36} {f.mode:04o}  -> {f.goes_to}  ({f.what})")
    return 0
