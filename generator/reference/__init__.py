"""NumPy reference models: the independent check every generated C engine is held to."""

from .needle2 import MODES, Needle2, State

__all__ = ["MODES", "Needle2", "State"]
