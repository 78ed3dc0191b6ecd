"""The lab: a local Slurm test cluster, a fake Slurm, and the demo and end-to-end harnesses. The product never imports it."""
