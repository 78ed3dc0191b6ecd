"""Run a function on a module right after it is first imported, whoever imports it and whenever.

torchtitan must be patched after its fault-tolerant trainer module exists but before it builds a trainer;
a wrapper that changes what torchtitan imports (the lab's CPU enablement) must run first. An import hook
satisfies both without caring about the order the modules run in.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, hook: Callable[[types.ModuleType], None]) -> None:
        self.name, self.hook = name, hook

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the real finders below answer the lookup
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, hook = spec.loader, self.hook

        class _Hooked(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: types.ModuleType) -> None:
                loader.exec_module(module)
                hook(module)

        spec.loader = _Hooked()
        return spec


def when_imported(name: str, hook: Callable[[types.ModuleType], None]) -> None:
    """Call `hook(module)` once `name` has been imported (at once if it already was)."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    sys.meta_path.insert(0, _Finder(name, hook))
