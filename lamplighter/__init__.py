"""lamplighter: keeps fault-tolerant (torchft) PyTorch training alive on Slurm and bare metal."""

__version__ = "0.1.0"
