"""The real backend: torch + transformers models, generation and training.

Importing the package loads nothing: `real.hub` (fetching a model) and `real.settings` (the commands'
settings) need no torch, and `tltsim real ... --help` reads only those.
"""
