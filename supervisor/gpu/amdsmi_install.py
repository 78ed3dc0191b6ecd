"""Is the amdsmi this node uses the right one? Found, expected and how to fix, in one sentence each.

amdsmi is two halves that must match: the Python package (ctypes bindings) and
the C library `libamd_smi.so` of the node's ROCm. On a ROCm node both come
from the ROCm install (`pip install $ROCM_PATH/share/amd_smi`); the PyPI
package (lamplighter's `[gpusim]` extra) is for the simulated GPUs of tests
and demos. What goes wrong, and how it shows:
- no package: `import amdsmi` raises ModuleNotFoundError;
- no library: the package prints "Unable to find libamd_smi.so" on stdout and
  raises KeyError('libamd_smi.so') at import;
- package newer than the library: import raises AttributeError naming a
  function the library lacks ("undefined symbol: amdsmi_...");
- package of another ROCm release that still imports: its version (PyPI
  packages carry the ROCm version, e.g. 7.0.2) differs from the ROCm release
  in `$ROCM_PATH/.info/version`, and structures may be read with the wrong
  layout, so readings cannot be trusted.
Pure functions of the facts; `gather` and `installed_version` look at the machine.
Every probe worker calls `gather` before importing amdsmi, so it stays cheap
(no importlib.metadata, whose import alone costs tens of ms per worker).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROCM = "/opt/rocm"
VERSION_FILE = ".info/version"
# Package versions that look like a ROCm release (6.4.3, 7.0.2); ROCm's own copy may carry the
# library's version instead (24.x, 25.x, 26.x), which is not comparable with the release.
_ROCM_STYLE_MAJOR_MAX = 19


@dataclass(frozen=True)
class AmdsmiFacts:
    python: str
    module: str
    package_version: str | None  # None: no package installed
    rocm_path: str
    rocm_version: str | None  # None: no $ROCM_PATH/.info/version
    library: str | None = None  # the libamd_smi.so the package loaded (after a successful import)


def rocm_release(text: str) -> str | None:
    """`7.0.2-56` (ROCm's .info/version) -> `7.0.2`."""
    m = re.match(r"\s*(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def installed_version(module: str) -> str | None:
    """The installed distribution's version; None if there is none (only needed when the import failed)."""
    import importlib.metadata

    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def gather(module: str, version: str | None, env: Mapping[str, str] | None = None) -> AmdsmiFacts:
    """The facts, with the package version the caller found (amdsmi.__version__, or installed_version)."""
    env = os.environ if env is None else env
    rocm = env.get("ROCM_HOME") or env.get("ROCM_PATH") or DEFAULT_ROCM
    try:
        rocm_version = rocm_release((Path(rocm) / VERSION_FILE).read_text())
    except OSError:
        rocm_version = None
    return AmdsmiFacts(sys.executable, module, version, rocm, rocm_version)


def fix(f: AmdsmiFacts) -> str:
    return (
        f"fix: install the amdsmi of this node's ROCm into the Python that runs lamplighter: "
        f"`{f.python} -m pip install {f.rocm_path}/share/amd_smi` (set ROCM_PATH if ROCm is elsewhere); "
        f"for simulated GPUs: `pip install 'lamplighter[gpusim]'` and point ROCM_PATH at the gpusim build"
    )


def _expected(f: AmdsmiFacts) -> str:
    rocm = f"ROCm {f.rocm_version}" if f.rocm_version else "ROCm (no release found in " + VERSION_FILE + ")"
    return f"expected: the amdsmi package of {rocm} at {f.rocm_path}, with its {f.rocm_path}/lib/libamd_smi.so"


def import_failure(f: AmdsmiFacts, exc: BaseException, printed: str = "") -> str:
    """Why `import amdsmi` failed, for the GPU check's report."""
    said = " ".join(printed.split())
    if f.package_version is None or isinstance(exc, ModuleNotFoundError):
        found = f"found: no `{f.module}` package for {f.python}"
    elif isinstance(exc, KeyError) or "libamd_smi" in said:
        found = f"found: {f.module} {f.package_version}, which could not load libamd_smi.so ({said or exc})"
    elif isinstance(exc, AttributeError):
        found = (
            f"found: {f.module} {f.package_version}, whose bindings need a function the loaded libamd_smi.so "
            f"lacks ({exc}): package and library are of different ROCm releases"
        )
    else:
        found = f"found: {f.module} {f.package_version}, whose import failed ({type(exc).__name__}: {exc})"
    return f"amdsmi unusable: {found}; {_expected(f)}; {fix(f)}"


def mismatch(f: AmdsmiFacts) -> str | None:
    """A package of another ROCm release than the node's, though it imported; None if they match or cannot be compared."""
    if f.package_version is None or f.rocm_version is None:
        return None
    pkg = rocm_release(f.package_version)
    if pkg is None or int(pkg.split(".")[0]) > _ROCM_STYLE_MAJOR_MAX:
        return None
    if pkg.split(".")[:2] == f.rocm_version.split(".")[:2]:
        return None
    lib = f" (loaded {f.library})" if f.library else ""
    return (
        f"amdsmi mismatched: found: {f.module} {f.package_version} (a ROCm {pkg} package){lib}; "
        f"{_expected(f)}; readings through mismatched bindings cannot be trusted; {fix(f)}"
    )
