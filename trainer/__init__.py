"""trainer: the reference torchft trainer, and the contract between any trainer and its supervisor.

Public modules (the package re-exports nothing: import them; only main, model,
ft_setup, heal_transport and train_state need torch):
    contract   environment variables, exit codes and run-directory paths both sides use; the one atomic
               file writer (write_json_atomic, write_text_atomic)
    heartbeat  write_heartbeat: the progress signal any trainer may write (no torch)
    steplog    StepRecord and the per-step JSON-lines log
    progress   the job's progress, and what a starting group must do about it
    stop_at    the owner's "stop at step N" for a running job (run dir's stop-at; no torch)
    identity   who this trainer process is, from its environment
    adapter    a third-party trainer's (torchtitan's) argv and environment
    boot_copy  lamplighter's torchtitan launch copied into <run_dir>/boot (submit), for a container's trainers
    heal_transport  torchft's HTTP heal transport, loading with weights_only=True (never unpickles code)
    main       the reference trainer (`python -m lamplighter.trainer --config PATH`)

Layer: above configs (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs
"""
