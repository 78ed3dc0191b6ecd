"""supervisor/report: the run report: what was committed and lost, what each fault cost, goodput.

local mode writes it at the end of `lamplighter local`; the lab's Slurm and bare-metal demos
(lab/run_report.py, lab/bare_report.py) build the same report from their runs, and the benchmarks
(bench/metrics.py) count with its definitions.

Public modules (the package re-exports nothing: import them):
    report         build_report, run_ok, lost_steps, rolled_back: the report from the step logs and the fault journal
    fault_journal  FaultJournal, FaultRecord: what happened to each fault, with times
    steady_rate    goodput's yardstick: the fault-free rate of the run's own steady stretches
    baseline       a fault-free run's rate, goodput's second yardstick (given, read from a report, or measured)
    step_tail      StepTail: following the groups' step logs as they grow (the live view, the chaos injector)
    timeline       timeline.png: loss and participating groups over time, faults marked (matplotlib, lazily)
    summary        the few lines printed at the end of `lamplighter local`

Layer within supervisor/ (a description: tools/import_graph.py holds only the top-level folders to a
`May import:` line): above lighthouse/ (step_tail reads the Lighthouse step log), below local/; imports
none of the core's modules.
"""
