"""supervisor: the per-node supervisor (`lamplighter supervise`, root): its checks, the node and head loops.

Its core (the package re-exports nothing: import them):
    executor        carries out the loops' actions: journals the intent, checks the world, then acts
    node_policy     the pure decision of the node daemon: from events to actions, each with its reason
    state_store, state_journal, recovery   the daemon's state, its fsync'd journal, and redoing an interrupted action
    metrics         Prometheus metrics; status_socket, unix_server: the status socket; sd_notify: systemd
    health_report   the node health reports the daemon publishes and the commands read
    job_table       which jobs run on this node, from Slurm; neighbour_watch: a group's peers' Lighthouse
    gpu_baselines   GPU error-counter baselines kept across daemon restarts; last_status: the last cycle's status
Subfolders:
    checks/   the trainer checks (exits, hangs, D state, memory, links), each one method given what it reads
    gpu/      GPU health through amdsmi, probed in killable worker processes
    node/     the compute node's loop: adoption and identity of trainers, exits, hang watches, node checks
    head/     the head's loop: one batched view of the cluster, failed jobs, held jobs
    user_reads/   job.json, lighthouse.json and the Lighthouse page, parsed by helpers of the job's user

Layer: above slurm (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, slurm, supervisor/checks, supervisor/gpu
"""
