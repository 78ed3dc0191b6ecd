"""The comm timeouts a torchtitan job's config module sets, read without torchtitan, for `validate`.

torchtitan's own watchdog (`comm.init_timeout_seconds`, `comm.train_timeout_seconds`) must outlast the
torchft waits a rank can spend inside it (torchtitan_flags.comm_needs), or the group kills itself in the
middle of a recovery. A job usually sets them in its `--module` file (`init --torchtitan` writes one:
`CommConfig(init_timeout_seconds=..., train_timeout_seconds=...)`), not as flags; validate runs on a
login node that may have no torchtitan, so the file is parsed (never imported: nothing in it runs), and
only literal whole numbers are taken. The module is looked for beside the job file and on the
PYTHONPATH the job gives its trainer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from lamplighter.configs.schema import JobConfig
from lamplighter.configs.torchtitan_flags import comm_needs, flag_value

MAX_MODULE_BYTES = 1 << 20
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
FIELDS = ("init_timeout_seconds", "train_timeout_seconds")


@dataclass
class ModuleCheck:
    line: str  # what validate prints
    problems: list[str] = field(default_factory=list)  # comm timeouts a torchft wait outlasts: invalid
    warnings: list[str] = field(default_factory=list)


def module_file(job: JobConfig, job_file: Path) -> tuple[str | None, Path | None, list[Path]]:
    """The --module name, its file if found, and where it was looked for."""
    command = job.trainer.command or []
    name = flag_value(command, "module")
    if not name or not _MODULE.fullmatch(name):
        return name, None, []
    base = job_file.resolve().parent
    paths = [base] + [
        Path(p) if Path(p).is_absolute() else base / p for p in job.trainer.env.get("PYTHONPATH", "").split(":") if p
    ]
    rel = Path(*name.split("."))
    for d in paths:
        for candidate in (d / rel.with_suffix(".py"), d / rel / "__init__.py"):
            if candidate.is_file():
                return name, candidate, paths
    return name, None, paths


def comm_timeouts(source: str, config_fn: str | None) -> dict[str, int]:
    """`comm.<field>` -> its literal value in the CommConfig(...) call of the config function (or, when the
    function is not found, of the module's only such call)."""
    tree = ast.parse(source)
    scope: ast.AST = tree
    if config_fn:
        fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == config_fn), None)
        scope = fn if fn is not None else tree
    calls = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == "CommConfig" or getattr(n.func, "attr", None) == "CommConfig")
    ]
    if len(calls) != 1:
        return {}
    out = {}
    for kw in calls[0].keywords:
        if kw.arg in FIELDS and isinstance(kw.value, ast.Constant) and type(kw.value.value) is int:
            out[f"comm.{kw.arg}"] = kw.value.value
    return out


def check_module_comm(job: JobConfig, job_file: Path) -> ModuleCheck | None:
    """For a torchtitan job: its module's comm timeouts against the torchft waits (None: not torchtitan)."""
    if job.trainer.kind != "torchtitan":
        return None
    name, path, looked = module_file(job, job_file)
    if name is None:
        return ModuleCheck("  torchtitan  no --module in trainer.command: comm timeouts are torchtitan's defaults")
    if path is None:
        where = ", ".join(str(p) for p in looked) or "nowhere"
        return ModuleCheck(
            f"  torchtitan  module {name}: not found here, comm timeouts not checked",
            warnings=[f"--module={name}: no {name.replace('.', '/')}.py beside the job or on trainer.env PYTHONPATH "
                      f"({where}): validate cannot check its comm timeouts against the torchft ones"],
        )  # fmt: skip
    try:
        source = path.read_bytes()[: MAX_MODULE_BYTES + 1]
        if len(source) > MAX_MODULE_BYTES:
            raise ValueError(f"larger than {MAX_MODULE_BYTES} bytes")
        found = comm_timeouts(source.decode("utf-8", "replace"), flag_value(job.trainer.command or [], "config"))
    except (OSError, ValueError, SyntaxError) as e:
        return ModuleCheck(f"  torchtitan  {path}: not read", warnings=[f"{path}: cannot read its comm timeouts: {e}"])
    command = job.trainer.command or []
    ft = job.torchft
    needs = comm_needs(
        quorum_s=ft.quorum_timeout_s, timeout_s=ft.timeout_s, connect_s=ft.connect_timeout_s, pg_s=ft.pg_timeout_s
    )
    said, problems = [], []
    for key, (need, why) in needs.items():
        if flag_value(command, key) is not None:
            continue  # a typed flag wins over the module, and the config's own rule checks it
        value = found.get(key)
        if value is None:
            said.append(f"{key.split('.')[1]} torchtitan's default")
            continue
        said.append(f"{key.split('.')[1]} {value} s (needs > {need})")
        if value <= need:
            problems.append(
                f"{path} sets {key.split('.')[1]}={value} s, but a rank can wait {need} s in it ({why}): "
                f"set it to {need + 30} or more, or lower the torchft timeouts"
            )
    return ModuleCheck(f"  torchtitan  {path.name}: {', '.join(said)}", problems)
