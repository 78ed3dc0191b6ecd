"""GPU health through amdsmi, probed in killable worker processes (see check.py)."""
