"""system: what the kernel says about this machine's processes, links and ports, and what is installed.

Public modules (the package re-exports nothing: import them):
    procfs        the one reader of /proc (stat, status, environ, cgroup, children)
    sysfs         the one reader of /sys (NIC links)
    process_tree  start and kill a group's OS process trees
    trainer_proc  TrainerProc, ProcessTable: the one record of a trainer process the checks watch
    ports         free_port, accepts_connections
    installed     the versions beside lamplighter (`lamplighter --version`)
    users         uid_of: a configured owner's uid

Layer: above rundir (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: rundir
"""
