"""Load a YAML config into the schema, with errors that name file, line and key.

The YAML is composed into a node tree first so that every key keeps its line;
pydantic's errors are then translated into one `Problem` per mistake:
unknown keys list the valid ones and suggest the nearest, wrong types say what
was expected, cross-field rules explain themselves with the values.

Overrides (documented in the README and `--help`): `--set key.path=value`
on the command line, and the environment variable LAMPLIGHTER_SET holding
`key.path=value` entries separated by `;`. Values are parsed as YAML scalars.
The environment is applied first, then `--set`; both are validated like the file,
and a problem with one is blamed on it (`--set lighthouse.prot=5: ...`), not on
a line of the file.

The rules across keys (the timeout hierarchy) run only on a config whose keys
are each valid. So that one run shows every problem, a config with broken keys
is checked again with those keys at their defaults, and the rules it breaks
that involve none of the broken keys are reported too; when even that cannot
run (a required key is missing), the errors end with a line saying that more
checks follow once they are fixed.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from lamplighter.configs.schema import JobConfig, NodeConfig

ENV_OVERRIDES = "LAMPLIGHTER_SET"
Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    source: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        # Cross-field messages already start with the key they blame.
        if not self.key or self.message.startswith(self.key):
            return f"{where}: {self.message}"
        return f"{where}: {self.key}: {self.message}"


class ConfigError(Exception):
    """A config that must not be used; `problems` lists every mistake found.

    `incomplete`: the rules across keys could not run on it yet (MORE_CHECKS says so to a person)."""

    def __init__(self, problems: list[Problem], incomplete: bool = False) -> None:
        self.problems = problems
        self.incomplete = incomplete
        super().__init__("\n".join(str(p) for p in problems))


def load_job(path: str | Path, overrides: Sequence[str] = (), env: Mapping[str, str] | None = None) -> JobConfig:
    """A job's config file, YAML or JSON: a job.json too (its format_version checked and taken out, job_file.py)."""
    from lamplighter.configs.job_file import version_header  # job_file builds on this module

    return load(JobConfig, path, overrides, env, header=version_header(str(path)))


def load_node(path: str | Path, overrides: Sequence[str] = (), env: Mapping[str, str] | None = None) -> NodeConfig:
    return load(NodeConfig, path, overrides, env)


def load(
    model: type[M],
    path: str | Path,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    header: Callable[[dict[str, Any], dict[Loc, int]], None] | None = None,
) -> M:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([Problem(source, None, "", f"cannot read the file: {e}")]) from None
    return parse(model, text, source, overrides, env, header=header)


def parse(
    model: type[M],
    text: str,
    source: str = "<string>",
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    header: Callable[[dict[str, Any], dict[Loc, int]], None] | None = None,
) -> M:
    """`text` as `model`; `header`, if given, sees the composed mapping and each key's line first: it may take
    a file format's own keys out of it (configs/job_file.py: job.json's format_version) or raise ConfigError."""
    data, lines = _compose(text, source)
    if header is not None:
        header(data, lines)
    origin: dict[Loc, str] = {}
    env_entries = [e for e in (env or {}).get(ENV_OVERRIDES, "").split(";") if e.strip()]
    for label, entries in ((f"${ENV_OVERRIDES}", env_entries), ("--set", list(overrides))):
        for entry in entries:
            loc = _apply_override(data, entry.strip(), label, source)
            origin[loc] = f"{label} {entry.strip()}"
    try:
        return model.model_validate(data)
    except ValidationError as e:
        found = _problems(model, e, source, lines, origin)
        more = _rules_across_keys(model, data, e, source, lines, origin)
        raise ConfigError(found + [p for p in more or [] if p not in found], incomplete=more is None) from None


MORE_CHECKS = "fix these first: the checks across keys (the timeout hierarchy) run once they are fixed"


def _rules_across_keys(
    model: type[BaseModel],
    data: dict[str, Any],
    err: ValidationError,
    source: str,
    lines: dict[Loc, int],
    origin: dict[Loc, str],
) -> list[Problem] | None:
    """The cross-field rules on `data` with its broken keys left to their defaults, less those naming a broken
    key; [] when they already ran (their errors are in `err`) or pass; None when they could not run."""
    broken: list[Loc] = [tuple(e["loc"]) for e in err.errors()]
    if any(loc == () for loc in broken):
        return []  # the model's own rules ran: every key was valid
    if any(e["type"] == "missing" for e in err.errors()):
        return None
    trimmed = copy.deepcopy(data)
    for loc in broken:
        if not _drop(trimmed, loc):
            return None
    try:
        model.model_validate(trimmed)
    except ValidationError as again:
        if any(tuple(e["loc"]) != () for e in again.errors()):
            return None  # a nested model's rule broke: what the defaults make of it says nothing
        return [
            p for p in _problems(model, again, source, lines, origin) if not any(_overlaps(p.key, b) for b in broken)
        ]
    except Exception:  # the defaults themselves did not fit; nothing more to say
        return None
    return []


def _drop(data: Any, loc: Loc) -> bool:
    """Delete the key at `loc` (its nearest mapping key, for a list item): True if done."""
    keys = [p for p in loc if isinstance(p, str)]
    cur = data
    for part in keys[:-1]:
        cur = cur.get(part) if isinstance(cur, dict) else None
    if not keys or not isinstance(cur, dict) or keys[-1] not in cur:
        return False
    del cur[keys[-1]]
    return True


def _overlaps(key: str, loc: Loc) -> bool:
    broken = _dotted(tuple(p for p in loc if isinstance(p, str)))
    return bool(key) and (key == broken or key.startswith(broken + ".") or broken.startswith(key + "."))


def _compose(text: str, source: str) -> tuple[dict[str, Any], dict[Loc, int]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError([Problem(source, line, "", f"not valid YAML: {problem}")]) from None
    if node is None:
        raise ConfigError([Problem(source, None, "", "the file is empty; a config is a YAML mapping of keys")])
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError([Problem(source, node.start_mark.line + 1, "", "a config must be a YAML mapping of keys")])
    lines: dict[Loc, int] = {}
    problems: list[Problem] = []
    data = _build(node, (), lines, problems, source)
    if problems:
        raise ConfigError(problems)
    assert isinstance(data, dict)
    return data, lines


def _build(node: yaml.Node, loc: Loc, lines: dict[Loc, int], problems: list[Problem], source: str) -> Any:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            key = _scalar(knode, problems, source)
            if not isinstance(key, str):
                problems.append(
                    Problem(source, knode.start_mark.line + 1, _dotted(loc), f"key {key!r} is not a string")
                )
                continue
            if key in out:
                problems.append(
                    Problem(
                        source, knode.start_mark.line + 1, _dotted(loc + (key,)), "key appears twice in one mapping"
                    )
                )
                continue
            out[key] = _build(vnode, loc + (key,), lines, problems, source)
            lines[loc + (key,)] = knode.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, loc + (i,), lines, problems, source) for i, item in enumerate(node.value)]
    return _scalar(node, problems, source)


def _scalar(node: yaml.Node, problems: list[Problem], source: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        problems.append(Problem(source, node.start_mark.line + 1, "", "a key must be a plain value"))
        return None
    try:
        return yaml.SafeLoader("").construct_object(node)
    except yaml.YAMLError as e:
        problems.append(Problem(source, node.start_mark.line + 1, "", f"bad value: {e}"))
        return None


def _apply_override(data: dict[str, Any], entry: str, label: str, source: str) -> Loc:
    key, sep, raw = entry.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
        raise ConfigError([Problem(source, None, "", f"{label} {entry!r}: expected key.path=value")])
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(source, None, key, f"{label} {entry!r}: value is not valid YAML: {e}")]) from None
    parts = key.split(".")
    cur: Any = data
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise ConfigError([Problem(source, None, key, f"{label}: {p} is not a section")])
        cur = nxt
    cur[parts[-1]] = value
    return tuple(parts)


def _problems(
    model: type[BaseModel], err: ValidationError, source: str, lines: dict[Loc, int], origin: dict[Loc, str]
) -> list[Problem]:
    out: list[Problem] = []
    for e in err.errors():
        loc: Loc = tuple(e["loc"])
        kind = e["type"]
        msg = e["msg"]
        if kind == "extra_forbidden":
            valid = _valid_keys(model, loc[:-1])
            bad = str(loc[-1])
            near = difflib.get_close_matches(bad, valid, n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else "."
            where = f"in '{_dotted(loc[:-1])}'" if loc[:-1] else "at the top level"
            msg = f"unknown key '{bad}' {where}{hint} Valid keys: {', '.join(valid)}"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind in ("value_error", "assertion_error"):
            msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
        else:
            msg = f"{msg[0].lower()}{msg[1:]}; got {e.get('input')!r}"
        for part in msg.split("\n"):
            ploc = _loc_named_in(part) or loc
            key = _dotted(ploc)
            override = _override_for(ploc, origin)
            if override is not None:
                # Blame the override, not the file's line: the file may not even have the key.
                out.append(Problem(override, None, key, part))
                continue
            out.append(Problem(source, _line_for(ploc, lines), key, part))
    return out


def _override_for(loc: Loc, origin: dict[Loc, str]) -> str | None:
    """The override that set the key at `loc`, or one below it (an unknown section it created)."""
    if loc in origin:
        return origin[loc]
    if not loc:
        return None
    below = [o for okey, o in origin.items() if okey[: len(loc)] == loc]
    return below[-1] if below else None


def _loc_named_in(message: str) -> Loc | None:
    # Cross-field rules start with the key they blame, e.g. "health.hang_timeout_s (5 s) must ..."
    m = re.match(r"([a-z_]+(?:\.[a-z_]+)+) \(", message)
    return tuple(m.group(1).split(".")) if m else None


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    while loc not in lines and loc:
        loc = loc[:-1]
    return lines.get(loc)


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc)


def _valid_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    cls: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part) if isinstance(cls, type) and issubclass(cls, BaseModel) else None
        if field is None:
            return []
        cls = model_in(field.annotation)
        if cls is None:
            return []
    return sorted(cls.model_fields) if isinstance(cls, type) and issubclass(cls, BaseModel) else []


def model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for arg in typing.get_args(annotation):
            found = model_in(arg)
            if found is not None:
                return found
    return None
