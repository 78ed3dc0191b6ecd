"""supervisor/head: the head's loop (`lamplighter supervise`, role head): one batched view for everyone.

Public modules (the package re-exports nothing: import them):
    loop         HeadLoop: the cluster view, silent nodes, the job table
    failed_jobs  a failed group no node daemon acted on, requeued by the head (the third judge)
    held_jobs    groups held by Slurm, released

Layer within supervisor/: above the core.
May import: configs, rundir, system, lighthouse, policy, slurm, supervisor
"""
