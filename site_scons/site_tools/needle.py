"""SCons finds its tools here; the needle tool itself is generator/build/scons_tool.py.

Two places load this file: SCons itself, for the repository's SConstruct (site_scons/ beside
it), and a user's own SConstruct through toolpath=[generator.paths.scons_toolpath()], which
names this directory inside an installed package (docs/install.md).  In a clone the
repository root goes on sys.path, so the clone's generator is the one the tool runs; an
installed package's copy of this file sits in generator/_share/, with no generator/ beside it,
and imports the installed generator."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.isfile(os.path.join(ROOT, "generator", "__init__.py")) and ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from generator.build.scons_tool import exists, generate  # noqa: E402,F401
