"""supervisor/node: the compute node's loop (`lamplighter supervise`, role compute).

Public modules (the package re-exports nothing: import them):
    loop            ComputeLoop: one cycle: adopt trainers, resolve exits, watch hangs, check the node, act
    trainers        which processes are trainers of which job: the step's cgroup, verified against Slurm
    identity        a process's job, verified; job_settings: a job's own settings from its run dir
    job_watch       the checks of one job's trainers on this node; fencing: stale attempts
    health_checks   the node's own checks (GPUs, links, GPU count) and auto_resume
    lighthouse_reads   the job's Lighthouse as this node reads it; recovery_watch: recovery times from step logs

Layer within supervisor/: above the core.
May import: configs, rundir, system, lighthouse, policy, slurm, supervisor, supervisor/checks, supervisor/gpu
"""
