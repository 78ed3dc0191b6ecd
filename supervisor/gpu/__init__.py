"""supervisor/gpu: GPU health through amdsmi, probed in killable worker processes (see check.py).

Layer within supervisor/: the bottom, beside checks/.
May import: configs, policy
"""
