"""The drafter of a run, fitted, and whether training it pays.

    calibrate_drafter(speculation, metrics)  # calibrate: a verl run that speculated, from its logged accepted
                                             # lengths (`tltsim calibrate`): quality per step, drift, recovery
    fit_drafter(spot_runs, frozen_runs)      # fit: `tltsim real run`s' drafter probes (`tltsim fit-drafter`): the
                                             # simulator's drift and learning curve, and their prediction
    drift_sensitivity(trace, cfg)            # drift_sensitivity: the ways to get a drafter, over the drift
    ranking_sensitivity(trace, cfg, times)   # ranking_sensitivity: whether the ranking's order rests on the
                                             # trained drafter's accepted length and drift (each moved by 20%)

Both fits read a drafter's quality q off its accepted length through the acceptance model
(tltsim.drafter.acceptance; `fit.quality`) and take the drift as a robust (Theil-Sen) slope.
"""
