"""supervisor/lighthouse: torchft's Lighthouse, its own process (reading its /status is the core's lighthouse_status).

Public modules (the package re-exports nothing: import them):
    lighthouse         Lighthouse: run it on this machine and bring it back on the same address (local mode, the lab)
    lighthouse_main    `python -m lamplighter.supervisor.lighthouse.lighthouse_main`: the Lighthouse without importing
                       torch, which the Slurm Lighthouse job (slurm/render.py) and local mode both run
    lighthouse_memory  a restarted Lighthouse remembers who was alive (stand-ins for --restart-grace-ms)
    lighthouse_steplog the step log the supervisor writes from /status, for trainers that keep none of their own

Layer within supervisor/ (a description: tools/import_graph.py holds only the top-level folders to a
`May import:` line): above the core (ports, process_tree, checks.lighthouse_progress's group_of), below
report/ and local/.
"""
