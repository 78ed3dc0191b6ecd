"""lab: the test rig. The product never imports it, nor names it (tools/import_graph.py checks).

Public modules (the package re-exports nothing: import them):
    testcluster, testcluster_conf   a real Slurm cluster on this machine
    testcluster_net the cluster's optional node network: each node in a network namespace with its own address
    fake_slurm      FakeSlurm: an in-memory SlurmApi for fast tests
    slurm_lab       SlurmLab: the cluster, simulated GPUs and node daemons, as systemd would run them
    e2e_run, demo, run_report   `make demo-slurm` and the end-to-end harness, and their report
    __main__        `python -m lamplighter.lab cluster|chaos` (cluster_cli, chaos_cli)
    scale_replica   torch-free replica groups (torchft's Manager protocol via its native module) for the scale lab
    sdiag           slurmctld's RPC counts by type and user (`sdiag`), for the scale lab's control-plane load
    container_standin  a pyxis container stand-in: a command sees only an image's folders and the job's mounts

Layer: on top of the product (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, chaos, trainer, launch, slurm, report, supervisor, local, bare, commands, gpusim
"""
