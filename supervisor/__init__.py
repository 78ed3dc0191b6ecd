"""supervisor: the supervisor core, the same for local mode and the node daemon.

Public modules and packages (the package re-exports nothing: import them):
    checks/, gpu/       the health checks (progress, hang, D state, memory, exits) and the GPU check
    observations        what the checks saw; policy: the pure restart policy (judge_failure)
    procfs              the one reader of /proc; discovery: trainer processes by their environment
    process_tree        start and kill a group's OS process trees; ports: free_port
    lighthouse, lighthouse_status, lighthouse_main   torchft's Lighthouse: run it, read its quorum
    local_mode, local_cli   `lamplighter local`; chaos, chaos_injector: fault plans
    report, timeline, summary, fault_journal   the run report
    health_report, action_history, run_dir_actions, ratelimit   records the daemon writes and the CLIs read

Layer: above trainer (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer
"""
