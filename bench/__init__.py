"""Benchmarks: whole-run measurements that tests never make. `make bench` runs them all.

Entry: `python -m bench` (bench/__main__.py); results in bench/results/.

Layer: the top (configs, gpusim -> trainer -> supervisor -> injob -> slurm -> daemon; lab -> bench).
May import: configs, gpusim, trainer, supervisor, injob, slurm, daemon, bare, lab, plan
"""
