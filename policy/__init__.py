"""policy: the pure decisions every supervisor shares, and the observations they are made of.

Public modules (the package re-exports nothing: import them):
    observations  what the checks saw (ProcessExited, Hung, DState, MemoryHigh, LinkFault, GpuCountLow, ...)
    restart       the restart policy: judge_failure (the in-job agent, the node daemon, the head) and local mode's decide
    node_faults   which node faults drain the node, and the GPU-count fault
    ratelimit     may_drain, may_resume: how many nodes may be out at once

Layer: above configs (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs
"""
