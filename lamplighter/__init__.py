"""lamplighter: keeps fault-tolerant (torchft) PyTorch training alive on Slurm and bare metal.

Every top-level folder of the repository (configs/, rundir/, supervisor/, slurm/, commands/, ...) is
lamplighter.<folder> through a committed link here; docs/layout.md says what each holds.
The `lamplighter` command is commands/cli.py.

Layer: the entry, on top of the commands (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: commands
"""

__version__ = "0.1.0"
