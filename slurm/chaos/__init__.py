"""slurm/chaos: faults on a real cluster, the harm that chaos/'s plans call for (`lamplighter chaos JOB`).

Public modules (the package re-exports nothing: import them):
    inject     each fault kind done on the job's processes, nodes and GPUs
    runner     a chaos plan run against a job, with its report
    healer     kill-healer: the group a peer heals from, found and hurt mid-heal
    proc_find  the processes chaos may hit: by their environment or their port, never by name

Layer within slurm/: the top (it submits and ends jobs).
May import: configs, rundir, system, lighthouse, chaos, slurm, slurm/submit, slurm/injob, gpusim
"""
