"""commands: every `lamplighter X`, on top of everything they read.

Public modules (the package re-exports nothing: import them):
    cli             the `lamplighter` entry: its subcommands by module name (COMMAND_MODULES)
    init            `lamplighter init`: a commented starting config
    validate        `lamplighter validate`, and the --set/LAMPLIGHTER_SET override arguments every command takes
    render, job, status, jobs, logs, why   `lamplighter render|submit|status|cancel|chaos|list|logs|why` on Slurm
    bare_jobs       `lamplighter submit|status|cancel` of a bare-metal job (etcd), and `lamplighter hosts`
    local           `lamplighter local`
    supervise, supervise_bare   `lamplighter supervise`: the node daemon (Slurm role, head role, bare-metal role)
    daemon_status   `lamplighter daemon-status`: a node daemon's status socket
    healthcheck, nodes, node_check   `lamplighter healthcheck|nodes`: one GPU check acted on in Slurm
    revive          `lamplighter revive`: a job the daemons gave up on, back
    plan            `lamplighter plan`; deploy_files: `lamplighter deploy-files`; completion: shell completion

Layer: the top of the product (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: configs, rundir, system, lighthouse, policy, chaos, trainer, launch, slurm, report, supervisor, local, bare, plan, gpusim
"""
