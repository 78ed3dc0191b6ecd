"""supervisor/checks: the trainer checks, each a small object with one method, given what it reads.

Layer within supervisor/: the bottom (local mode and bare metal use them too).
May import: configs, rundir, system, lighthouse, policy
"""
