"""`python -m lamplighter_torchtitan MODULE ARGS...`: run MODULE as `__main__` with ARGS, torchtitan patched."""

from __future__ import annotations

import os
import runpy
import sys
import types

from .patch import Settings, patch
from .post_import import when_imported

TRAINER_MODULE = "torchtitan.experiments.torchft.trainer"


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m lamplighter_torchtitan MODULE [ARGS...]  (e.g. torchtitan.train)", file=sys.stderr)
        raise SystemExit(2)
    settings = Settings.from_env(dict(os.environ))

    def hook(module: types.ModuleType) -> None:
        patch(module, settings)

    when_imported(TRAINER_MODULE, hook)
    entry = sys.argv[1]
    sys.argv = [entry, *sys.argv[2:]]
    runpy.run_module(entry, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
