"""`python -m generator` and the installed console command `needle-fw`: the command line lives
in generator/commands/cli.py.

This file is the program's entry point: run by `python -m generator`, and its main() called by
the `needle-fw` script that pip writes (pyproject.toml, [project.scripts]); nothing else imports
it.  It puts the command line together, so it is the one place inside generator/ that may import
a package above generator (host_tests/test_layers.py): it registers the `bench` subcommand from
bench/host.py, which a clone has beside generator/ and an installed wheel does not carry."""

import sys

from generator.commands.cli import main as run
from generator.errors import CactError
from generator.paths import CHECKOUT, ROOT


def _add_bench(sub) -> None:
    """`bench`: bench/host.py of the clone this generator runs from (also through an editable
    install, from any directory).  A wheel ships no bench/ (the repository's benchmark drivers,
    which time an engine built by the repository's SConstruct), so there `bench` is one line
    saying where it lives."""
    if CHECKOUT and (ROOT / "bench" / "host.py").is_file():
        if str(ROOT) not in sys.path:       # python -m generator from the clone has it already
            sys.path.append(str(ROOT))
        from bench.host import add_command
        add_command(sub)
        return

    def refuse(args):
        raise CactError("bench is the repository's benchmark driver (bench/host.py), which the installed "
                        "package does not carry: run python -m generator bench from a clone")
    s = sub.add_parser("bench", help="engine vs NumPy reference speed (a clone's bench/host.py)")
    s.add_argument("archive", nargs="*", help="as python -m generator bench in a clone")
    s.add_argument("--engine")
    s.add_argument("--tokens")
    s.set_defaults(fn=refuse)


def main(prog: str = "needle-fw") -> int:
    return run(commands=[_add_bench], prog=prog)


if __name__ == "__main__":
    sys.exit(main(prog="python -m generator"))
