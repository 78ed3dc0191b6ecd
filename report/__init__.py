"""report: the run report: what was committed and lost, what each fault cost, goodput.

local mode writes it at the end of `lamplighter local`; the lab's Slurm and bare-metal demos
(lab/run_report.py, lab/bare_report.py) build the same report, and bench/metrics.py counts with it.

Public modules (the package re-exports nothing: import them):
    build          build_report, run_ok, lost_steps, rolled_back: the report from the step logs and the fault journal
    fault_journal  FaultJournal, FaultRecord: what happened to each fault, with times
    steady_rate    goodput's yardstick: the fault-free rate of the run's own steady stretches
    baseline       a fault-free run's rate, goodput's second yardstick
    step_tail      StepTail: following the groups' step logs as they grow
    timeline       timeline.png: loss and participating groups over time, faults marked (matplotlib, lazily)
    summary        the few lines printed at the end of `lamplighter local`

Layer: above lighthouse (configs -> rundir -> system -> lighthouse, policy, chaos, trainer -> launch -> slurm -> report -> supervisor -> local, bare -> commands; lab -> bench).
May import: rundir, lighthouse
"""
