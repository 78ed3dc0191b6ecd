"""slurm/injob: what runs inside a group's Slurm job, as the job's user: the in-job agent and renew.

The group's batch script runs the agent (`python -m lamplighter.slurm.injob.agent`), which starts the
trainer step, keeps a warm spare step in the job's own allocation (srun --overlap) and restarts a failed
trainer inside the allocation: no root process in between, no requeue. A node fault, or a spent in-job
budget, still ends the job for the node daemon to requeue.

Public modules (the package re-exports nothing: import them):
    agent     `python -m lamplighter.slurm.injob.agent`: the loop around the trainer and spare steps
    decide    the pure decision after a trainer step ended: done, restart (warm or cold), or end the job
    steps     the srun steps: the trainer's, the spare's, and turning the spare into the trainer
    events    `<run_dir>/injob/g<N>.jsonl`: the agent's restarts, read by reports and chaos
    renew     renew the group before its time limit

Layer within slurm/: above the API (its one Slurm call function), below submit/.
May import: configs, rundir, system, lighthouse, policy, trainer, launch, slurm
"""
