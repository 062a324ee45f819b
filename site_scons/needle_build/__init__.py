"""The repository's SConstruct, in modules (SCons puts site_scons/ on sys.path before it reads
the SConstruct): `options` declares and checks the command line's options, `board` builds one
board (`env.NeedleBoard`), `steps` adds the steps after a build as environment methods (run,
gdb, flash, check, eval, bench, package, lib, dist).  The builders they use are the SCons tool's
(generator/build/scons_tool.py, loaded as site_scons/site_tools/needle.py); unlike the tool,
these modules are not installed with the package: they are this repository's build."""
