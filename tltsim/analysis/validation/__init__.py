"""Sim-vs-real validation: the replay of a real run, the work domain (what the engines did, counted), and where the
decisions diverged; what real runs (checked) and published GPU figures (published) have checked the simulator on."""
