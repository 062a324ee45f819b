"""SCons finds its tools here; the needle tool itself is generator/build/scons_tool.py."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from generator.build.scons_tool import exists, generate  # noqa: E402,F401
