"""What a drafter accepts and costs, beneath the executors that use it.

    acceptance        accepted length per verify from a strategy and the drafter's quality q
    quality           q over RL steps: staleness as the policy moves, recovery with training
    families          each kind of drafter: what a speculative iteration's drafting costs, how it trains
    history_quality   history drafting's q from what a trace holds, and its lookup cost (data/: its fitted rows)

The cluster's settings (tltsim.config), the simulator (tltsim.sim), the policies and the analysis read these
models; none of them is imported here, so the settings and the simulator stand on the drafter's models without
standing on each other in a circle.
"""
