"""lamplighter's launch for torchtitan: upstream fixes for the versions that need them, and a per-step state hash.

Runs inside the training environment (torchtitan, torchft, torch), not lamplighter's: standard library only
at import. `python -m lamplighter_torchtitan MODULE ARGS...` runs MODULE (torchtitan.train, or a wrapper of
it) as `__main__` with ARGS, after arranging for torchtitan's fault-tolerant trainer to be patched when it is
imported (post_import.py). What is patched, and for which versions: fixes.py. The step log: step_log.py.
"""
