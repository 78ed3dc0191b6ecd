"""lighthouse: torchft's Lighthouse, its process, and everything read from its /status.

Public modules (the package re-exports nothing: import them):
    main          `python -m lamplighter.lighthouse.main`: the Lighthouse without torch (the Slurm job and local mode)
    spawn         Lighthouse: start it on this machine and bring it back on the same address (local mode, the lab)
    memory        a restarted Lighthouse remembers who was alive (stand-ins for --restart-grace-ms)
    status        fetch_status, parse_status: its quorum from /status
    progress      LighthouseProgress: a group's progress as the Lighthouse sees it (a ProgressSource)
    steplog       the step log kept from /status, for trainers that keep none of their own
    quorum_churn  how often the quorum changed, from /status
Three Lighthouse files live where what they speak lives: supervisor/node/lighthouse_reads.py (the node
daemon's reads, through Slurm), slurm/submit/lighthouse_log.py and lighthouse_time.py (its Slurm job).

Layer: above rundir and system (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system
"""
