"""Build integration: board files (boards/*.toml), post-link ELF checks, the SCons tool."""
