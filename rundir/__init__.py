"""rundir: the run directory, the one contract between a job's trainers, its supervisors and the commands.

Public modules (the package re-exports nothing: import them):
    contract        environment names, exit codes, the attempt encoding, RunPaths, the atomic file writers
    owned_file      read_owned: root's one way to read a user's file (a regular file the user owns, bounded)
    bounded_read    read_bounded: a pipe, socket or HTTP answer read with a size and time bound
    steplog         StepRecord and the per-step JSON-lines log each group writes
    stop_at         the stop-at file: the step every group stops at
    heartbeats      Progress, ProgressSource, HeartbeatFiles: when a group attempt last made progress
    actions         the one action line: format_action, a daemon's ActionLog, and RunDirActions (its copy in the
                    job's run directory, written as the job's user)
    action_history  reading the action lines back (`lamplighter why`)
    as_user         become: how a child root forked drops to a job's user for good (no capability left)

Layer: the bottom, beside configs (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: nothing
"""
