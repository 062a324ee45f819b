"""Where needle-fw's data lives, stated once for every stage.

In a clone (and in an editable install, `pip install -e .`, which runs the clone's files) the
data is the repository itself: templates/, firmware/, boards/, site_scons/ and LICENSE beside
generator/.  An installed wheel (`pip install .`) carries the same trees inside the package,
in generator/_share/ (pyproject.toml maps them there), and ROOT is that directory.  Nothing
else in generator/ locates these files: every stage reads them through the names below."""

from pathlib import Path

GENERATOR_DIR = Path(__file__).resolve().parent    # the generator package itself
_SHARE = GENERATOR_DIR / "_share"                  # only in an installed wheel
CHECKOUT = not _SHARE.is_dir()                     # running a clone's files (or an editable install)
ROOT = GENERATOR_DIR.parent if CHECKOUT else _SHARE
BOARDS_DIR = ROOT / "boards"            # one TOML file per target
TEMPLATES_DIR = ROOT / "templates"      # every line of generated C, assembly and linker text
KERNELS_DIR = TEMPLATES_DIR / "kernels"  # the kernel families' templates (generator/codegen/families.py)
FIRMWARE_DIR = ROOT / "firmware"        # the hand-written C the generated engine is built with
DATA_DIR = GENERATOR_DIR / "data"       # the trained tokenizer models synth packs
SCONS_TOOLPATH = ROOT / "site_scons" / "site_tools"   # holds needle.py, the SCons tool "needle"


def scons_toolpath() -> str:
    """The directory to give SCons as toolpath= so that tools=["needle"] loads needle-fw's SCons
    tool (generator/build/scons_tool.py) from wherever generator is installed (docs/install.md)."""
    return str(SCONS_TOOLPATH)
