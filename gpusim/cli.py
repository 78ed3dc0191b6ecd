"""`lamplighter gpusim ...`: create simulated GPUs and give them faults while a process reads them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lamplighter.gpusim.inject import FAULT_HELP, FAULT_KINDS, clear, inject
from lamplighter.gpusim.state import BLOCKS, ENV_DIR, MODELS, GpusimError, StateDir

_EPILOG = f"""\
The state folder (--dir, default ${ENV_DIR}) is read by the simulated
libamd_smi.so on every call, so an injection is seen by running processes at
their next amdsmi call. Point the real `amdsmi` package at the simulation with:

  export ROCM_PATH=build/gpusim {ENV_DIR}=/tmp/gpus

examples:
  lamplighter gpusim build
  lamplighter gpusim init --dir /tmp/gpus --gpus 8
  lamplighter gpusim inject --dir /tmp/gpus --gpu 3 --fault ecc-uncorrectable --count 2
  lamplighter gpusim inject --gpu 5 --fault thermal --value 118
  lamplighter gpusim inject --gpu 2 --fault hang      # calls on GPU 2 now block
  lamplighter gpusim clear --gpu 2                    # ...and return
  lamplighter gpusim show
"""

_FAULTS_HELP = "\n".join(f"  {k:<18} {v}" for k, v in FAULT_HELP.items())


def add_parser(subparsers: Any) -> None:
    """Register `gpusim` and its sub-commands on the lamplighter CLI."""
    p = subparsers.add_parser(
        "gpusim",
        help="simulated AMD GPUs for tests: init, inject faults, clear, show, build",
        description=__doc__,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])
    sub = p.add_subparsers(dest="gpusim_command", metavar="COMMAND")

    def with_dir(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--dir", default=None, help=f"state folder (default: ${ENV_DIR})")

    init = sub.add_parser(
        "init",
        help="create a state folder with N healthy GPUs",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    with_dir(init)
    init.add_argument("--gpus", type=int, default=8, help="number of GPUs (default 8, like an MI300X node)")
    init.add_argument("--model", choices=sorted(MODELS), default="mi300x", help="GPU model (default mi300x)")
    init.set_defaults(func=_cmd_init)

    inj = sub.add_parser(
        "inject",
        help="give one GPU a fault",
        epilog="fault kinds:\n" + _FAULTS_HELP + "\n\n" + _EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    with_dir(inj)
    inj.add_argument("--gpu", type=int, required=True, help="GPU index (0-based)")
    inj.add_argument("--fault", required=True, metavar="KIND", help="one of: " + ", ".join(FAULT_KINDS))
    inj.add_argument("--count", type=int, default=1, help="how many errors/pages (default 1)")
    inj.add_argument("--value", type=float, default=None, help="temperature in C (thermal) or pid (vmfault)")
    inj.add_argument(
        "--block", default="umc", help="ECC block for ecc-* faults (default umc); one of: " + ", ".join(BLOCKS)
    )
    inj.set_defaults(func=_cmd_inject)

    clr = sub.add_parser("clear", help="return one GPU (or all) to healthy; releases a hang")
    with_dir(clr)
    clr.add_argument("--gpu", type=int, default=None, help="GPU index (default: all GPUs)")
    clr.set_defaults(func=_cmd_clear)

    show = sub.add_parser("show", help="print every GPU's state and queued events")
    with_dir(show)
    show.set_defaults(func=_cmd_show)

    build = sub.add_parser("build", help="build the simulated libamd_smi.so (only if sources changed)")
    build.add_argument(
        "--out", type=Path, default=None, help="output folder (default: build/gpusim in the source tree)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    build.set_defaults(func=_cmd_build)


def _fail(exc: Exception) -> int:
    print(f"lamplighter gpusim: error: {exc}", file=sys.stderr)
    return 2


def _cmd_init(args: argparse.Namespace) -> int:
    try:
        sd = StateDir.from_arg(args.dir)
        sd.init(args.gpus, args.model)
    except GpusimError as exc:
        return _fail(exc)
    print(f"{sd.root}: {args.gpus} healthy {MODELS[args.model].name} GPUs")
    return 0


def _cmd_inject(args: argparse.Namespace) -> int:
    try:
        print(inject(StateDir.from_arg(args.dir), args.gpu, args.fault, args.count, args.value, args.block))
    except GpusimError as exc:
        return _fail(exc)
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    try:
        gpus = clear(StateDir.from_arg(args.dir), args.gpu)
    except GpusimError as exc:
        return _fail(exc)
    print("cleared GPU " + ", ".join(map(str, gpus)))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        sd = StateDir.from_arg(args.dir)
        for i in range(sd.gpu_count()):
            st = sd.read(i)
            flags = [f for f, on in (("HANG", st.hang), ("LOST", st.lost)) if on]
            temps = " ".join(f"{s}=" + ("na" if v is None else f"{v}C") for s, v in st.temp.items())
            print(
                f"GPU {i} {st.bdf} {' '.join(flags) or 'ok'}: ecc ce={sum(st.ecc_ce.values())} "
                f"ue={sum(st.ecc_ue.values())} de={sum(st.ecc_de.values())} | {temps} | "
                f"bad_pages={st.bad_pages} xgmi={st.xgmi_status} | events={len(sd.read_events(i))}"
            )
    except GpusimError as exc:
        return _fail(exc)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from lamplighter.gpusim.build import BuildError, ensure_built
    from lamplighter.gpusim.symbols import WrapperNotFound

    try:
        print(ensure_built(args.out, force=args.force))
    except (BuildError, WrapperNotFound) as exc:
        return _fail(exc)
    return 0
