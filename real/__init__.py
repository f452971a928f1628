"""The real backend: torch + transformers models, generation and training."""
from real.drafter import Drafter
from real.generate import Engine, generate

__all__ = ["Drafter", "Engine", "generate"]
