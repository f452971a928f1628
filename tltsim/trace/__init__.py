"""Response-length traces: schema, file formats, statistics, synthetic generators.

    load(path) -> Trace          Parquet / CSV / JSONL, length logs, Vidur CSV, PolyTrace multi-turn log
    save(trace, path)            atomically, metadata kept
    stats(trace) -> dict         per-step and overall length figures, tail share
    synth(family, ...) -> Trace  seeded synthetic traces (families in FAMILIES)
"""
from tltsim.trace.formats import load, save
from tltsim.trace.schema import OPTIONAL, REQUIRED, Trace, TraceMeta, checked
from tltsim.trace.stats import stats, tail_share
from tltsim.trace.synth import FAMILIES, synth

__all__ = ["Trace", "TraceMeta", "checked", "REQUIRED", "OPTIONAL", "load", "save", "stats", "tail_share", "synth", "FAMILIES"]
