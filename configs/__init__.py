"""configs: lamplighter's configuration, one schema for a job and for a node daemon.

Public modules (the package re-exports nothing: import them):
    schema            JobConfig, NodeConfig and their sections
    loader            load_job, load_node: YAML -> schema, errors naming file:line: key
    job_file          <run_dir>/job.json: the job as its readers take it, with its format version
    slurm_names       the names lamplighter writes into Slurm (job names, node reason prefix)
    torchtitan_flags  torchtitan's flags derived from a job
    reference         docs/config.md's config reference (`make readme`)

Layer: the bottom (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench; gpusim and plan apart).
May import: nothing
"""
