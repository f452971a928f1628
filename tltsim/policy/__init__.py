"""The policy layer: decisions both executors (simulator and `real/`) drive.

Plain objects with no simpy and no torch: each takes what was observed and
returns a decision. The simulator calls them with simulated time; `real/`
calls the very same objects with the wall clock (DESIGN.md, "one policy
layer, two executors"). Also here: the acceptance and drafter-quality models
the policies act on.
"""
