"""Build the simulated libamd_smi.so with the machine's gcc.

    python -m lamplighter.gpusim.build [--out DIR] [--force]

Output: DIR/lib/libamd_smi.so (DIR defaults to build/gpusim in the source
tree), so ``ROCM_PATH=DIR`` or ``LD_LIBRARY_PATH=DIR/lib`` makes the installed
`amdsmi` package load it. DIR/gen/stubs.c is generated from the installed
wrapper's bindings. The build is skipped when the C sources, the wrapper and
the compiler command are unchanged (a digest is kept in DIR/.digest); the new
library is renamed into place, so a process loading it never sees half a file.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lamplighter.gpusim import symbols

SOURCE_ROOT = Path(__file__).resolve().parent.parent
CFLAGS = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-std=gnu11"]
LIB_NAME = "libamd_smi.so"
ENV_DIR = "LAMPLIGHTER_GPUSIM_DIR"


class BuildError(RuntimeError):
    """The simulated library could not be built; the message says why."""


def default_out() -> Path:
    return SOURCE_ROOT / "build" / "gpusim"


def library_path(out: Path) -> Path:
    return out / "lib" / LIB_NAME


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise BuildError("no C compiler: gcc is not on PATH (apt-get install gcc)")
    return cc


def _digest(cc: str, wrapper_source: str) -> str:
    h = hashlib.sha256()
    h.update(" ".join([cc, *CFLAGS]).encode())
    h.update(wrapper_source.encode())
    for path in sorted(symbols.CSRC.glob("*")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(Path(symbols.__file__).read_bytes())  # the stub generator itself
    return h.hexdigest()


def _compile(out: Path, cc: str, stub_c: str) -> None:
    gen = out / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    (out / "lib").mkdir(parents=True, exist_ok=True)
    stubs = gen / "stubs.c"
    stubs.write_text(stub_c)
    sources = sorted(str(p) for p in symbols.CSRC.glob("*.c")) + [str(stubs)]
    tmp = library_path(out).with_name(f".{LIB_NAME}.{os.getpid()}.tmp")
    cmd = [cc, *CFLAGS, f"-I{symbols.CSRC}", "-o", str(tmp), *sources]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"gcc failed building {library_path(out)} (exit {proc.returncode}):\n{proc.stderr.strip()}")
    os.replace(tmp, library_path(out))


def ensure_built(out: Path | None = None, force: bool = False) -> Path:
    """Build the library into `out` unless it is up to date; return the path of libamd_smi.so."""
    out = (out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    wrapper_source = symbols.wrapper_path().read_text()
    cc = _compiler()
    digest = _digest(cc, wrapper_source)
    stamp = out / ".digest"
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test sessions build once
        _write_rocm_version(out)
        if not force and library_path(out).is_file() and stamp.is_file() and stamp.read_text() == digest:
            return library_path(out)
        bound = symbols.bound_symbols(wrapper_source)
        _compile(out, cc, symbols.stub_source(bound, symbols.modelled_symbols()))
        stamp.write_text(digest)
    return library_path(out)


# The ROCm release the simulation stands for: the amdsmi package it is built against (PyPI 7.0.2).
SIM_ROCM_VERSION = "7.0.2-gpusim"


def _write_rocm_version(out: Path) -> None:
    """`<out>/.info/version`, as a ROCm install has it: the GPU check compares amdsmi's version with it."""
    path = out / ".info" / "version"
    if not path.is_file() or path.read_text() != SIM_ROCM_VERSION + "\n":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SIM_ROCM_VERSION + "\n")


def sim_env(out: Path, state_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment under which `import amdsmi` loads the simulation and sees the GPUs in state_dir."""
    env = dict(os.environ if base is None else base)
    env.pop("ROCM_HOME", None)  # the wrapper prefers ROCM_HOME over ROCM_PATH
    env["ROCM_PATH"] = str(out)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [str(out / "lib"), env.get("LD_LIBRARY_PATH", "")] if p)
    env[ENV_DIR] = str(state_dir)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lamplighter.gpusim.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=None, help=f"output folder (default: {default_out()})")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    try:
        lib = ensure_built(args.out, force=args.force)
    except (BuildError, symbols.WrapperNotFound) as exc:
        print(f"gpusim build: {exc}", file=sys.stderr)
        return 1
    print(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
