"""supervisor/local: `lamplighter local`, an adapter like slurm/ and bare/.

Where slurm/ and bare/ run the supervisor core on a cluster, this runs it on one
machine: the Lighthouse and N replica groups, with chaos and a run report at the end.

Public modules (the package re-exports nothing: import them):
    local_cli     `lamplighter local CONFIG ...` (the CLI names it in lamplighter/cli.py's COMMAND_MODULES)
    local_mode    LocalRun: the loop around the Lighthouse, the groups, the checks, the policy and chaos
    local_launch  argv and environment of a group's processes (bare/host_daemon.py starts its groups with it too)
    live_view     the table a person watching the run sees
    termination   SIGTERM and SIGHUP stop a run as Ctrl-C does

Layer within supervisor/ (a description: tools/import_graph.py holds only the top-level folders to a
`May import:` line): the top of supervisor/; imports the core, lighthouse/, report/ and chaos/, and none of
them imports it.
"""
