"""The per-node supervisor daemon's own parts: systemd notification, persisted
state, trainer discovery, the drain rate limit, metrics, the status socket and
the action log. The main loop that wires them to the checks, the policy and
the Slurm actions lives elsewhere."""
