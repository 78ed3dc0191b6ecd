"""bare: the bare-metal adapter (no Slurm): etcd holds which host is alive and which group runs where.

Public modules (the package re-exports nothing: import them):
    etcd_store   Store: the one way lamplighter talks to etcd (every call bounded, endpoints tried in turn)
    keys         the key layout of one cluster in etcd
    etcd_roles   who may write what in etcd: a role per host, per submitter, an operator's; the check a host makes
    placement    the pure placement decision: which group goes to which host, and why
    placer       the placer role: won by election, its writes fenced by its leadership
    host_lease   a host's liveness: a lease kept alive, and when the host must fence itself
    host_agent   the pure decision of a host daemon: fence, kill stale epochs, start, restart or give up
    accounts     whose local account a job's trainers run as: the etcd user who submitted it, never root unasked
    user_launch  trainers started, and run-dir lines written, as that account (setpriv: no capabilities)
    prefix_reader  the cluster's prefix, read only when its watch (prefix_watch) or an answer says it changed
    host_actions the host's action lines (rundir/actions.py's), in its log and as each job's account in its run dir
    host_daemon  one host daemon: lease, placer role, trainers (die with the daemon: setpriv --pdeathsig)

Layer: a runtime beside local (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, launch, supervisor
"""
