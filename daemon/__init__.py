"""daemon: the per-node daemon (`lamplighter supervise`).

Its loops wire the supervisor's checks and policy to the Slurm actions; its own
parts are systemd notification, persisted state, metrics, the status socket and
the action log.

Public modules (the package re-exports nothing: import them):
    supervise_cli   `lamplighter supervise`, run_daemon
    compute_loop, head_loop   the two roles' cycles
    node_policy     the pure node policy; executor: carries its actions out, journaled
    node_trainers, job_identity   a job's processes by their cgroup, verified against Slurm (never by their environment)
    fencing         processes of a run Slurm moved on from (a node cut off from Slurm): killed
    state_store     the persisted state; recovery: finishing what a killed daemon left pending
    status_socket   read_status: the local status endpoint (`lamplighter status`)
    last_status     what that endpoint answers: the loop's status as of its last whole cycle
    unix_server     the status socket's server
    metrics         the Prometheus metrics
    revive_cli      `lamplighter revive`: a group the daemons gave up on, back as a fresh Slurm job (as its owner)

Layer: above the Slurm adapter (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer, supervisor, injob, slurm, bare
"""
