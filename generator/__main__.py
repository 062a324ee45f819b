"""`python -m generator`: the command line lives in generator/commands/cli.py.

This file is the program's entry point: run, never imported.  It puts the command line
together, so it is the one place inside generator/ that may import a package above generator
(host_tests/test_layers.py): it registers the `bench` subcommand from bench/host.py."""

import sys

from bench.host import add_command as add_bench
from generator.commands.cli import main

sys.exit(main(commands=[add_bench]))
