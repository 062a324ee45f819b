"""NumPy reference models: the independent check every generated C engine is held to."""

from generator.model.needle2 import MODES, Needle2, State
from generator.model.needle3 import Needle3, State3

__all__ = ["MODES", "Needle2", "State", "Needle3", "State3"]
