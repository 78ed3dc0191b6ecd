"""slurm: everything that speaks Slurm, as root or as the job's user.

The Slurm API here (the package re-exports nothing: import them):
    run            SlurmCli: the one way a Slurm command runs (a timeout, an error that names the command)
    parsers        pure parsers of sbatch, squeue, sacct and scontrol output, tested on recorded output
    actions        SlurmApi (the protocol fakes implement) and SlurmActions
    requeue        move a group's job off a failed node and start it now
    hostlist       Slurm's host lists; step_cgroup: which job and step a process is in, from /proc/PID/cgroup
    drained_nodes  the nodes lamplighter drained; head_table: the head's published job table, read
    drain_budget   one drain budget for the cluster: a drain checked after it is made against Slurm's stamps
Subfolders:
    submit/   a user's submission: sbatch scripts (render), the record of a submission, a job's end, its Lighthouse job
    injob/    what runs inside a group's job as the user: the in-job agent and renew
    chaos/    faults on a real cluster (`lamplighter chaos JOB`)

Layer: above trainer and launch (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, chaos, trainer, launch, gpusim
"""
