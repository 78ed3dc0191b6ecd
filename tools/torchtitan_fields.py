"""Extract torchtitan's command-line config fields into the fixture lamplighter's tests check flags against.

    python tools/torchtitan_fields.py                     # pip download --no-deps torchtitan==0.3.0
    python tools/torchtitan_fields.py --wheel PATH.whl    # a wheel already here
    (writes tests/trainer/torchtitan_fields.json)

torchtitan 0.3 parses `--<section>.<field>` flags with tyro over the config
dataclass its `--module/--config` function returns. For fault-tolerant runs
that is `FaultTolerantTrainer.Config` (torchtitan/experiments/torchft), and its
sections have the classes torchtitan's own torchft config function
(`llama3_torchft_debugmodel`) builds: e.g. `checkpoint` is
`TorchFTCheckpointManager.Config`, which has `enable_ft_dataloader_checkpoints`,
while the base `Trainer.Config` only annotates `BaseCheckpointManager.Config`.

The wheel's source is read, never imported (importing torchtitan needs a
newer torch than lamplighter pins, triton and more): classes, their base
classes, annotated fields and `from ... import` re-exports are followed
through the AST. Fields annotated with `tyro.conf.Suppress` are not flags.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "0.3.0"
ROOT = "torchtitan.experiments.torchft.trainer.FaultTolerantTrainer.Config"
REGISTRY = "torchtitan.experiments.torchft.llama3.config_registry.llama3_torchft_debugmodel"
OUT = Path(__file__).resolve().parents[1] / "tests" / "trainer" / "torchtitan_fields.json"


@dataclass
class Module:
    name: str
    is_package: bool
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)  # "Outer.Inner" -> node
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)


class Source:
    """Every module of one torchtitan wheel, by dotted name."""

    def __init__(self, files: dict[str, str]) -> None:
        self.modules: dict[str, Module] = {}
        for path, text in files.items():
            if not path.endswith(".py"):
                continue
            parts = path[:-3].split("/")
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            self.modules[name] = self._index(name, is_package, ast.parse(text, path))

    @staticmethod
    def _index(name: str, is_package: bool, tree: ast.Module) -> Module:
        mod = Module(name, is_package, tree)
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    mod.imports[alias.asname or alias.name] = f"{base}.{alias.name}"

        def classes(body: list[ast.stmt], prefix: str) -> None:
            for stmt in body:
                if isinstance(stmt, ast.ClassDef):
                    mod.classes[prefix + stmt.name] = stmt
                    classes(stmt.body, f"{prefix}{stmt.name}.")
                elif isinstance(stmt, ast.FunctionDef) and not prefix:
                    mod.functions[stmt.name] = stmt

        classes(tree.body, "")
        return mod

    def find_class(self, qualname: str, depth: int = 0) -> tuple[Module, str] | None:
        """(module, class path in it) for a dotted name, following `from x import y` re-exports."""
        if depth > 20:
            return None
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = self.modules.get(".".join(parts[:i]))
            if mod is None:
                continue
            rest = parts[i:]
            if ".".join(rest) in mod.classes:
                return mod, ".".join(rest)
            if rest[0] in mod.imports:  # a re-export, or a name imported into that module
                return self.find_class(".".join([mod.imports[rest[0]], *rest[1:]]), depth + 1)
            if ".".join(parts[: i + 1]) in self.modules:
                continue  # a submodule: look deeper
            return None
        return None

    def reexports(self, mod: Module, path: str) -> list[str]:
        """Other dotted names of a class: packages that re-export it (`torchtitan.config.TrainingConfig`)."""
        head, _, rest = path.partition(".")
        out = []
        for other in self.modules.values():
            if not other.is_package or other is mod:
                continue
            for local, target in other.imports.items():
                if target == f"{mod.name}.{head}" or self.find_class(target) == (mod, head):
                    out.append(f"{other.name}.{local}" + (f".{rest}" if rest else ""))
        return sorted(set(out))

    def resolve(self, mod: Module, expr: ast.expr, scope: str = "") -> tuple[Module, str] | None:
        """The class an expression (Name or Attribute chain) in `mod` names, if any."""
        dotted = _dotted(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        # A name inside a class body may refer to a sibling nested class (e.g. `Config` in `Outer`).
        scopes = scope.split(".") if scope else []
        for i in range(len(scopes), -1, -1):
            local = ".".join([*scopes[:i], dotted])
            if local in mod.classes:
                return mod, local
        if head in mod.imports:
            return self.find_class(mod.imports[head] + (f".{rest}" if rest else ""))
        return None

    def fields(self, mod: Module, path: str, seen: frozenset[str] = frozenset()) -> dict[str, str]:
        """Annotated fields of a class and its bases (bases first), name -> annotation source."""
        key = f"{mod.name}.{path}"
        if key in seen:
            return {}
        node = mod.classes[path]
        out: dict[str, str] = {}
        scope = path.rpartition(".")[0]
        for base in node.bases:
            found = self.resolve(mod, base, scope)
            if found is not None:
                out.update(self.fields(*found, seen=seen | {key}))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                text = ast.unparse(stmt.annotation)
                if stmt.target.id.startswith("_") or "ClassVar" in text:
                    continue
                out[stmt.target.id] = text
        return out

    def field_class(self, mod: Module, path: str, name: str) -> tuple[Module, str] | None:
        """The class of a field's default (`field(default_factory=X)`, which tyro parses), else of its annotation."""
        node = mod.classes[path]
        scope = path.rpartition(".")[0]
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                value = stmt.value
                if isinstance(value, ast.Call) and _dotted(value.func) in ("field", "dataclasses.field"):
                    for kw in value.keywords:
                        if kw.arg == "default_factory":
                            found = self.resolve(mod, kw.value, scope)
                            if found is not None:
                                return found
                return self._class_in(mod, stmt.annotation, scope)
        for base in node.bases:
            found = self.resolve(mod, base, path.rpartition(".")[0])
            if found is not None:
                sub = self.field_class(*found, name)
                if sub is not None:
                    return sub
        return None

    def _class_in(self, mod: Module, ann: ast.expr, scope: str) -> tuple[Module, str] | None:
        if isinstance(ann, ast.Subscript) and _dotted(ann.value) in ("Annotated", "typing.Annotated"):
            first = ann.slice.elts[0] if isinstance(ann.slice, ast.Tuple) else ann.slice
            return self._class_in(mod, first, scope)
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return self._class_in(mod, ann.left, scope) or self._class_in(mod, ann.right, scope)
        return self.resolve(mod, ann, scope)


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = _dotted(expr.value)
        return None if inner is None else f"{inner}.{expr.attr}"
    return None


def _registry_sections(src: Source, registry: str) -> dict[str, tuple[Module, str]]:
    """section -> class, from the keyword arguments of the Config(...) a config function returns."""
    mod_name, _, fn_name = registry.rpartition(".")
    mod = src.modules[mod_name]
    fn = mod.functions[fn_name]
    out: dict[str, tuple[Module, str]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            for kw in node.value.keywords:
                if kw.arg and isinstance(kw.value, ast.Call):
                    found = src.resolve(mod, kw.value.func)
                    if found is not None:
                        out[kw.arg] = found
    return out


def extract(files: dict[str, str], root: str = ROOT, registry: str = REGISTRY) -> dict[str, Any]:
    """The fixture: top-level fields and sections of `root`; a section has the class `registry` builds it
    with, else its field's default_factory (what tyro parses), else its annotation."""
    src = Source(files)
    found = src.find_class(root)
    if found is None:
        raise SystemExit(f"{root} not found in the wheel")
    root_mod, root_path = found
    built = _registry_sections(src, registry)
    top: dict[str, str] = {}
    sections: dict[str, Any] = {}
    for name, ann in src.fields(root_mod, root_path).items():
        if "Suppress" in ann:
            continue
        cls = built.get(name) or src.field_class(root_mod, root_path, name)
        if cls is None:
            top[name] = ann
            continue
        sections[name] = {
            "class": f"{cls[0].name}.{cls[1]}",
            "also_importable_as": src.reexports(*cls),
            "fields": {k: v for k, v in src.fields(*cls).items() if "Suppress" not in v},
        }
    return {"root": root, "sections_as_built_by": registry, "top_level": top, "sections": sections}


def wheel_files(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode("utf-8") for n in z.namelist() if n.startswith("torchtitan/") and n.endswith(".py")}


def download(version: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"torchtitan=={version}", "-d", str(into)],
        check=True,
    )
    return next(into.glob("torchtitan-*.whl"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--version", default=VERSION, help=f"torchtitan version to download (default {VERSION})")
    p.add_argument("--wheel", type=Path, help="use this wheel instead of downloading one")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download(args.version, Path(tmp))
        fixture = {
            "torchtitan_wheel": wheel.name,
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "regenerate": "python tools/torchtitan_fields.py [--version V | --wheel W]",
            **extract(wheel_files(wheel)),
        }
    args.out.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: {len(fixture['sections'])} sections, {len(fixture['top_level'])} top-level fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
