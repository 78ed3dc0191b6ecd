"""injob: what runs inside a group's Slurm job, as the job's user: the in-job agent.

The group's batch script runs the agent (`python -m lamplighter.injob.agent`),
which starts the trainer step, keeps a warm spare step in the job's own
allocation (srun --overlap: the job's cgroup, devices, limits and accounting)
and restarts a failed trainer inside the allocation: no root process in
between, no Slurm requeue. A node fault, or a spent in-job budget, still ends
the job for the node daemon to requeue.

Public modules (the package re-exports nothing: import them):
    agent     `python -m lamplighter.injob.agent`: the loop around the trainer and spare steps
    decide    the pure decision after a trainer step ended: done, restart (warm or cold), or end the job
    steps     the srun steps: the trainer's, the spare's, and turning the spare into the trainer
    journal   `<run_dir>/injob/g<N>.jsonl`: the agent's restarts, read by reports and chaos

Layer: above supervisor (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, trainer, supervisor
"""
