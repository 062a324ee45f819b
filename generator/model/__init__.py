"""NumPy reference models: the independent check every generated C engine is held to."""

from generator.model.needle2 import MODES, Needle2, State
from generator.model.needle3 import Needle3, State3

GENERATIONS = {2: Needle2, 3: Needle3}


def reference(archive, mode: str):
    """The reference of the archive's generation in numerics mode `mode` (MODES: "float", the
    model as trained; "a8", the deployment numerics every engine computes bit for bit), with
    the archive's own KV window.  For a window, sinks or a rung of your own, construct the
    generation's class (Needle2, Needle3) with its options."""
    return GENERATIONS[archive.generation](archive, mode)


__all__ = ["MODES", "GENERATIONS", "Needle2", "State", "Needle3", "State3", "reference"]
