"""Response-length traces: schema, file formats, statistics, synthetic generators."""
from tltsim.trace.schema import OPTIONAL, REQUIRED, Trace, TraceMeta, validate

__all__ = ["Trace", "TraceMeta", "validate", "REQUIRED", "OPTIONAL"]
