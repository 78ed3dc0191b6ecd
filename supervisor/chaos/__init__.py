"""supervisor/chaos: fault plans, and when each planned fault fires and whom it hits (pure, no harm done here).

Paired with the Slurm half, slurm/chaos_slurm.py, slurm/chaos_runner.py and slurm/chaos_healer.py
(`lamplighter chaos JOB`), which plans with these same modules and does the harm on a cluster; that half
stays in slurm/ because supervisor/ may not import slurm/. local mode (local/local_mode.py) does the harm
on this machine.

Public modules (the package re-exports nothing: import them):
    chaos           parse_chaos, plan: `--chaos SPEC` or a schedule file -> the faults a seed gives
    chaos_injector  ChaosInjector: the exact and gentle modes, which fault fires now and on whom

Layer within supervisor/ (a description: tools/import_graph.py holds only the top-level folders to a
`May import:` line): the bottom of supervisor/; imports only configs, and local/ and slurm/ import it.
"""
