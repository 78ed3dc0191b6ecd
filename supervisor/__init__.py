"""supervisor: the supervisor core, the same for local mode, the node daemon and bare metal.

The core's public modules and packages (the package re-exports nothing: import them):
    checks/, gpu/       the health checks (progress, hang, D state, memory, exits, links) and the GPU check
    observations        what the checks saw; policy: the pure restart policy (judge_failure); node_faults
    procfs, sysfs       the one reader of /proc, of /sys; discovery: trainer processes by their environment
    process_tree        start and kill a group's OS process trees; ports: free_port; trainer_proc: what the checks watch
    standby, standby_main   warm standbys past `import torch`
    health_report, action_history, run_dir_actions, ratelimit   records the daemon writes and the CLIs read
    installed           what is installed beside lamplighter (`lamplighter --version`)
    lighthouse_status   fetch_status, parse_status: a Lighthouse's quorum from its /status page (the checks, the
                        node daemon, slurm/, bare/ and the Lighthouse's own step log read it)

One subfolder per role (subpackages; each __init__.py says what it holds):
    local/        `lamplighter local`: an adapter like slurm/ and bare/
    lighthouse/   torchft's Lighthouse: its own process (lighthouse_main), its memory and the step log kept from it
    report/       the run report, its fault journal, baseline, timeline and summary
    chaos/        fault plans and their injector, pure; paired with the Slurm half in slurm/chaos_*.py

Imports within supervisor/ (described here; tools/import_graph.py holds only the top-level folders to their
`May import:` line): chaos/ imports nothing of supervisor/; lighthouse/ imports the core; report/ imports
lighthouse/; local/ imports all of them. The core imports none of its subfolders.

Layer: above trainer (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer
"""
