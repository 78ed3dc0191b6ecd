"""launch: how a group's trainer process is started on a machine, cold or from a warm standby.

Public modules (the package re-exports nothing: import them):
    group          argv and environment of every process of a replica group (local mode, bare metal)
    standby        `python -m lamplighter.launch.standby`: a process past `import torch` waiting to become a trainer
    standby_pool   StandbyPool: keeps warm standbys and turns one into a trainer (local mode)

Layer: above trainer (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, trainer
"""
