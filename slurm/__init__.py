"""slurm: the Slurm adapter: render, submit, watch and move jobs; the user's Slurm commands.

Public modules (the package re-exports nothing: import them):
    run           SlurmCli: the one way a Slurm command runs
    parsers       pure parsers of sbatch, squeue and scontrol output
    actions       SlurmApi (the protocol fakes implement) and SlurmActions
    requeue       move a group's job off a failed node and start it now
    render, submission   sbatch scripts, and the record of a submission
    renew, release   torch-free helpers the rendered scripts run (the in-job agent is injob/agent.py)
    step_cgroup      which Slurm job and step a process is in, from /proc/PID/cgroup
    chaos_slurm, chaos_runner, chaos_healer, proc_find   faults on a real cluster, the Slurm half of chaos: paired with
                  supervisor/chaos/ (the plans and the injector they run), which may not import slurm/
    job_end       when a job is over, seen from outside
    job_cli, render_cli, why_cli, nodes_cli, healthcheck_cli   `lamplighter submit|status|cancel|chaos|render|why|nodes|healthcheck`
    job_logs, job_list   `lamplighter logs|list`; head_table: the head's published job table, read

Layer: above supervisor and injob (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer, supervisor, injob
"""
