"""Calibrating the simulator to a user's cluster from a verl run (`tltsim validate --verl-metrics M --trace T`).

    calibrate(trace, cfg, metrics) -> Calibration   # fit: each phase fitted to verl's own timers
    save(cal, path) / load_calibration(path)        # record: the JSON it is kept as, checked on reading
    apply(saved, cfg) -> SimConfig                  # ... and the cluster it calibrates
"""
from tltsim.analysis.calibration.fit import LENGTH_TOLERANCE, MIN_FIXED_STEPS, Calibration, calibrate
from tltsim.analysis.calibration.record import (FORMAT, KEYS, apply, cluster_notes, describe, drafter_overrides,
                                               load_calibration, save)

__all__ = ["FORMAT", "KEYS", "LENGTH_TOLERANCE", "MIN_FIXED_STEPS", "Calibration", "apply", "calibrate",
           "cluster_notes", "describe", "drafter_overrides", "load_calibration", "save"]
