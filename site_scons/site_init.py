"""Read by SCons before the SConstruct (the repository's own builds only): its "Reading
SConscript files ..." / "Building targets ..." lines say nothing a user acts on, so a build
prints as `scons -Q` does (SConstruct: one short line a step)."""

from SCons.Script import SetOption

SetOption("no_progress", True)
