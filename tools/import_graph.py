"""Imports between the top-level folders, and a check that they form no cycle.

The folders are installed under one `lamplighter` namespace (lamplighter/configs is a
link to configs/, and so on), so `lamplighter.slurm.run` lives in the folder slurm/;
the package's own files (commands/cli.py) are the folder `lamplighter`. tests/ sits
on top of everything and is not read. Only the stdlib: `make lint` runs it first.

A string that is a module's whole dotted name ("lamplighter.commands.job", as
importlib.import_module or a list of command modules takes it) counts as an
import too. Besides cycles, it fails when a product folder reaches the lab or
the benchmarks (LAB), by import or by name: they sit on top of the product;
and when a folder's __init__.py declares its place with a line
`May import: a, b` (or `May import: nothing`), on an import of any other folder.

    python tools/import_graph.py [ROOT]            # exit 1 naming each cycle and its import lines
    python tools/import_graph.py --mermaid [ROOT]  # the folder graph, for docs/layout.md (--text: plain)
"""

from __future__ import annotations

import argparse
import ast
import itertools
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "lamplighter"
NOT_READ = {"tests", "build", "deploy", "runs"}
LAB = {"lab", "bench"}  # the test rig and the benchmarks: no product folder may reach them


@dataclass(frozen=True)
class ImportLine:
    path: str
    line: int
    module: str
    how: str = "import"  # or "names": a string holding the module's name


def folders(root: Path) -> list[str]:
    """The top-level folders that are Python packages (the package's own folder among them)."""
    return [
        d.name
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.is_symlink() and (d / "__init__.py").exists() and d.name not in NOT_READ
    ]


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every absolute import, lazy ones inside functions too."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from lamplighter import slurm` names the folder in the alias, not the module.
            if node.module == PACKAGE:
                out.extend((node.lineno, f"{PACKAGE}.{alias.name}") for alias in node.names)
            else:
                out.append((node.lineno, node.module))
    return out


def named_modules(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every string that is a dotted module name inside one of the folders."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            # Only lamplighter.<folder>...: logger names like "lamplighter.supervise" name no folder.
            if (
                len(parts) > 1
                and parts[0] == PACKAGE
                and parts[1] in names
                and parts[1] != PACKAGE
                and all(p.isidentifier() for p in parts)
            ):
                out.append((node.lineno, node.value))
    return out


def folder_of(module: str, names: set[str]) -> str | None:
    """The folder a module lives in; None for the stdlib and third-party packages."""
    parts = module.split(".")
    if parts[0] == PACKAGE:
        if len(parts) > 1 and parts[1] in names and parts[1] != PACKAGE:
            return parts[1]
        return PACKAGE
    if parts[0] in names and parts[0] != PACKAGE:
        return parts[0]
    return None


def python_files(folder: Path) -> list[Path]:
    """The folder's own .py files; lamplighter/<folder> links are not followed (read once, by name)."""
    found: list[Path] = []
    for dirpath, _dirs, files in os.walk(folder):  # os.walk follows no directory link
        found += [Path(dirpath) / f for f in files if f.endswith(".py")]
    return sorted(found)


def unit_of(module: str, names: set[str], root: Path) -> str | None:
    """The folder, or folder/subpackage, a module lives in (a subpackage is a node within its folder)."""
    folder = folder_of(module, names)
    if folder is None or folder == PACKAGE:
        return folder
    parts = module.split(".")
    rest = parts[2:] if parts[0] == PACKAGE else parts[1:]
    if rest and (root / folder / rest[0] / "__init__.py").exists():
        return f"{folder}/{rest[0]}"  # a module in the subpackage, or the subpackage itself
    return folder


def unit_of_file(path: Path, root: Path) -> str:
    """The unit a file belongs to: its folder, or folder/subpackage for a file inside one."""
    rel = path.relative_to(root).parts
    if len(rel) >= 3 and (root / rel[0] / rel[1] / "__init__.py").exists():
        return f"{rel[0]}/{rel[1]}"
    return rel[0]


Arrows = dict[tuple[str, str], list[ImportLine]]


def scan(root: Path) -> tuple[Arrows, Arrows]:
    """Every file read once: (from folder, to folder) -> the import lines that make the arrow, none within a
    folder; and (from unit, to unit) within each product folder that has subpackages (folder -> folder/sub
    and back)."""
    names = set(folders(root))
    outer: Arrows = defaultdict(list)
    inner: Arrows = defaultdict(list)
    for name in sorted(names):
        for path in python_files(root / name):
            tree = ast.parse(path.read_text(), filename=str(path))
            rel, here = str(path.relative_to(root)), unit_of_file(path, root)
            refs = [(line, module, "import") for line, module in imported_modules(tree)]
            refs += [(line, module, "names") for line, module in named_modules(tree, names)]
            for line, module, how in refs:
                target = folder_of(module, names)
                if target is None:
                    continue
                if target != name:
                    outer[(name, target)].append(ImportLine(rel, line, module, how))
                elif name not in LAB:
                    unit = unit_of(module, names, root)
                    if unit is not None and unit != here:
                        inner[(here, unit)].append(ImportLine(rel, line, module, how))
    return dict(outer), dict(inner)


def declared(root: Path) -> dict[str, set[str]]:
    """Each folder's and subpackage's `May import:` line from its __init__.py docstring (folders, and units of
    its own folder as folder/sub); those without one are not held to it."""
    out: dict[str, set[str]] = {}
    units = [*folders(root)]
    units += [
        f"{n}/{d.name}"
        for n in folders(root)
        if n not in LAB
        for d in sorted((root / n).iterdir())
        if d.is_dir() and not d.is_symlink() and (d / "__init__.py").exists()
    ]
    for name in units:
        doc = ast.get_docstring(ast.parse((root / name / "__init__.py").read_text())) or ""
        for line in doc.splitlines():
            if line.startswith("May import:"):
                targets = {t.strip() for t in line.removeprefix("May import:").split(",")}
                out[name] = targets - {"nothing", ""}
    return out


def undeclared(
    arrows: dict[tuple[str, str], list[ImportLine]], allowed: dict[str, set[str]], root: Path | None = None
) -> list[tuple[str, str, ImportLine]]:
    """(unit, folder or unit it may not import, the line) for each import a declaration does not allow: a
    subpackage is held to its own line, a folder's own modules to the folder's."""
    out = []
    for (a, b), lines in sorted(arrows.items()):
        for imp in lines:
            who = unit_of_file(root / imp.path, root) if root is not None and "/" not in a else a
            if who in allowed and b not in allowed[who]:
                out.append((who, b, imp))
    return out


def reaches_lab(arrows: dict[tuple[str, str], list[ImportLine]]) -> list[ImportLine]:
    """The import lines by which a product folder reaches the lab or the benchmarks."""
    return [imp for (a, b), lines in sorted(arrows.items()) if b in LAB and a not in LAB for imp in lines]


def cycles(arrows: set[tuple[str, str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of folders (Tarjan), as a closed path."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(arrows):
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted({a for a, _ in arrows} | {b for _, b in arrows}):
        if v not in index:
            visit(v)
    return [_path_within(group, graph) for group in groups]


def _path_within(group: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A shortest closed path from the group's first folder back to itself, inside the group."""
    start, members = group[0], set(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    return group


def text(arrows: dict[tuple[str, str], list[ImportLine]]) -> str:
    """One line per folder: what it imports, with the number of import lines."""
    out: dict[str, list[str]] = defaultdict(list)
    for (a, b), lines in sorted(arrows.items()):
        out[a].append(f"{b} ({len(lines)})")
    return "\n".join(f"{a} -> {', '.join(targets)}" for a, targets in sorted(out.items()))


def mermaid(arrows: dict[tuple[str, str], list[ImportLine]]) -> str:
    lines = ["```mermaid", "graph TD"]
    lines += [f"    {a} --> {b}" for a, b in sorted(arrows)]
    lines.append("```")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".", type=Path)
    parser.add_argument("--mermaid", action="store_true", help="print the folder graph as mermaid")
    parser.add_argument("--text", action="store_true", help="print the folder graph as text")
    args = parser.parse_args(argv)
    arrows, inner = scan(args.root)
    if args.mermaid or args.text:
        print(mermaid(arrows) if args.mermaid else text(arrows))
        return 0
    found = cycles(set(arrows)) + cycles(set(inner))
    arrows_all = {**arrows, **inner}
    to_lab = reaches_lab(arrows)
    off_layer = undeclared(arrows, declared(args.root), args.root) + undeclared(inner, declared(args.root))
    if not found and not to_lab and not off_layer:
        print(
            f"import graph: {len(arrows)} arrows between folders and {len(inner)} within them, no cycle, "
            "no product folder reaches the lab, every folder and subfolder within its declared imports"
        )
        return 0
    for cycle in found:
        print("import cycle: " + " -> ".join(cycle), file=sys.stderr)
        for a, b in itertools.pairwise(cycle):
            for imp in arrows_all[(a, b)]:
                print(f"  {imp.path}:{imp.line}: {imp.how} {imp.module}  ({a} -> {b})", file=sys.stderr)
    if to_lab:
        print(f"the product reaches the lab ({', '.join(sorted(LAB))} sit on top of it):", file=sys.stderr)
        for imp in to_lab:
            print(f"  {imp.path}:{imp.line}: {imp.how} {imp.module}", file=sys.stderr)
    for a, b, imp in off_layer:
        print(f"{a}/__init__.py does not allow importing {b}:", file=sys.stderr)
        print(f"  {imp.path}:{imp.line}: {imp.how} {imp.module}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
