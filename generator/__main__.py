"""`python -m generator`: the command line lives in generator/commands/cli.py."""

import sys

from generator.commands.cli import main

sys.exit(main())
