"""supervisor/lighthouse: torchft's Lighthouse, its own process, and reading its /status.

Public modules (the package re-exports nothing: import them):
    lighthouse         Lighthouse: run it on this machine and bring it back on the same address (local mode, the lab)
    lighthouse_main    `python -m lamplighter.supervisor.lighthouse.lighthouse_main`: the Lighthouse without importing
                       torch, which the Slurm Lighthouse job (slurm/render.py) and local mode both run
    lighthouse_memory  a restarted Lighthouse remembers who was alive (stand-ins for --restart-grace-ms)
    lighthouse_status  fetch_status, parse_status: the quorum from its /status page (the node daemon, slurm/, bare/)
    lighthouse_steplog the step log the supervisor writes from /status, for trainers that keep none of their own

Layer within supervisor/ (a description: tools/import_graph.py holds only the top-level folders to a
`May import:` line): above the core (ports, process_tree, checks.lighthouse_progress's group_of), below
report/ and local/. One exception: lighthouse_status imports only the stdlib, and the core's Lighthouse
check (checks/lighthouse_progress.py) reads /status through it; no module imports back into a module
that imports it (no cycle between modules).
"""
