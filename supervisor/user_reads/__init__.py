"""supervisor/user_reads: what a job's user controls is parsed as that user, never in the root daemon.

A job's job.json, its lighthouse.json and its Lighthouse's /status page are the job's
own word. The compute daemon holds CAP_SETUID, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE and
CAP_KILL; a parser bug reached by such input must not run with them. So each is read and
parsed by a helper process of the job's user (its uid and primary group, no
supplementary groups, no capabilities, no new privileges), which hands the daemon a
small record that the daemon checks before it believes a value.

Modules (the package re-exports nothing: import them):
    zygote    the fork server started before the daemon has threads: forks each helper as its user
    helper    the helper's side: read, parse, answer one request at a time
    records   the records the helpers answer, and their strict check in the daemon
    wire      one JSON line each way, bounded
    pool      UserReads: the daemon's side, a helper per (user, kind of read), deadlines, back-off

Layer within supervisor/: above node/ (its records are node/'s JobSettings).
May import: configs, rundir, system, lighthouse, supervisor/node
"""
