"""The per-node daemon (`lamplighter supervise`): its loops wire the supervisor's checks and
policy to the Slurm actions; its own parts are systemd notification, persisted state,
metrics, the status socket and the action log."""
