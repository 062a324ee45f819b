"""needle-fw generator: read, validate, synthesise and (later) compile `.cact` archives."""

__version__ = "0.1.0"
