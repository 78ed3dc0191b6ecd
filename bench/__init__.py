"""Benchmarks: whole-run measurements that tests never make. `make bench` runs them all.

Entry: `python -m bench` (bench/__main__.py); results in bench/results/.

Layer: the top (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, chaos, trainer, launch, slurm, report, supervisor, local, bare, commands, lab, plan, gpusim
"""
