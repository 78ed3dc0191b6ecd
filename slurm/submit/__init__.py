"""slurm/submit: a user's submission: the sbatch scripts, the record of what was submitted, and a job's end.

Public modules (the package re-exports nothing: import them):
    render          the group and Lighthouse sbatch scripts
    submission      submit_job and the record of a submission (the run dir's submission.json)
    job_index       the user's index of submitted jobs (`lamplighter list`)
    job_end         when a job is over, seen from outside; release: the Lighthouse job ends once its groups have
    lighthouse_log, lighthouse_time   the Lighthouse job's log and its time limit

Layer within slurm/: above the API and injob/ (render names the agent), below chaos/.
May import: configs, rundir, system, lighthouse, policy, trainer, launch, slurm, slurm/injob
"""
