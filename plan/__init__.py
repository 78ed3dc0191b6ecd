"""plan: what faults cost a training job, by strategy, before it runs (`lamplighter plan`).

Public modules (the package re-exports nothing: import them):
    goodput_model   pure goodput model: goodput and lost GPU-hours of lamplighter, checkpoint-restart
                    (Young/Daly interval) and a 10 s poll runner, from cluster size, failure rate and costs
    ranges          the uncertain inputs, each pessimistic / central / optimistic with its basis, and the
                    published figures the projections are held against

Layer: beside configs, at the bottom (its defaults that mirror configs/schema.py are checked by tests/plan). The command is commands/plan.py.
May import: nothing
"""
