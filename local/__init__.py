"""local: `lamplighter local`, the supervisor on one machine: the Lighthouse and N replica groups.

Public modules (the package re-exports nothing: import them):
    run          LocalRun: the loop around the Lighthouse, the groups, the checks, the policy and chaos
    live_view    the table a person watching the run sees
    termination  SIGTERM and SIGHUP stop a run as Ctrl-C does
The command is commands/local.py.

Layer: a runtime beside bare (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, chaos, trainer, launch, report, supervisor
"""
