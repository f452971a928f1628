"""Sim-vs-real validation: the replay of a real run, the work domain (what the engines did, counted), and where the decisions diverged."""
