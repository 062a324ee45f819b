"""Where the repository's data lives, stated once for every stage."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOARDS_DIR = ROOT / "boards"            # one TOML file per target
TEMPLATES_DIR = ROOT / "templates"      # every line of generated C, assembly and linker text
KERNELS_DIR = TEMPLATES_DIR / "kernels"  # one template per kernel family
DATA_DIR = ROOT / "generator" / "data"  # the trained tokenizer models synth packs
