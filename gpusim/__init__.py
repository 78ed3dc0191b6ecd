"""gpusim: simulated AMD GPUs, a libamd_smi.so (C) that the real amdsmi package loads, with fault injection.

Public modules (the package re-exports nothing: import them):
    build    build the library (`python -m lamplighter.gpusim.build --out build/gpusim`)
    state    StateDir: the simulated GPUs' state folder
    inject   the fault kinds and inject()
    symbols  which amdsmi symbols are bound and which are modelled
    cli      `lamplighter gpusim init|inject|clear|show`

Layer: apart, at the bottom; the lab, the benchmarks and the commands that drive simulated GPUs use it.
May import: nothing
"""
