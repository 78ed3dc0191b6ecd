"""trainer: the reference torchft trainer, its heartbeat API, and the launch of third-party trainers (torchtitan).

Public modules (the package re-exports nothing: import them; only main, model,
ft_setup, heal_transport and train_state need torch):
    heartbeat  write_heartbeat: the progress signal any trainer may write (no torch)
    progress   the job's progress, and what a starting group must do about it
    identity   who this trainer process is, from its environment
    adapter    a third-party trainer's (torchtitan's) argv and environment
    boot_copy  lamplighter's torchtitan launch copied into <run_dir>/boot (submit), for a container's trainers
    heal_transport  torchft's HTTP heal transport, loading with weights_only=True (never unpickles code)
    main       the reference trainer (`python -m lamplighter.trainer --config PATH`)

Layer: above configs and rundir (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir
"""
