"""chaos: fault plans, and when each planned fault fires and whom it hits (pure, no harm done here).

local mode (local/run.py) does the harm on this machine; slurm/chaos/ (`lamplighter chaos JOB`) on a cluster.

Public modules (the package re-exports nothing: import them):
    plan      parse_chaos, plan: `--chaos SPEC` or a schedule file -> the faults a seed gives
    injector  ChaosInjector: the exact and gentle modes, which fault fires now and on whom

Layer: above configs (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs
"""
