"""lamplighter: keeps fault-tolerant (torchft) PyTorch training alive on Slurm and bare metal.

The folders configs/ trainer/ supervisor/ slurm/ daemon/ lab/ gpusim/ plan/ are
lamplighter.<folder> through committed links; this package itself is the
`lamplighter` command (cli.py), which names its subcommands' modules.

Layer: on top of the product, never the lab (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer, supervisor, injob, slurm, bare, daemon, plan
"""

__version__ = "0.1.0"
