"""The boards table of the documentation, rendered from boards/*.toml (generator.build.boards).

    python -m bench.pictures boards          # writes docs/_snippets/boards-table.md

One row per board file, the columns a user choosing a board needs: what it is, the core the
compiler targets, the operating system and console, the kernel family, the toolchain and the
Debian package that brings it, the emulator that runs it here (or none: flash it), the flash
and RAM the board file budgets, where the archive goes, and the engine's threads.  Nothing
here depends on the build machine (the host's kernel family is `auto`), so the committed
file equals what this renders on any machine; host_tests/test_pictures.py checks it.
"""

from __future__ import annotations

from generator.build import boards

SNIPPET = "docs/_snippets/boards-table.md"

PLACEMENT = {"linked": "linked into the image", "partition": "own flash partition",
             "file": "file, mapped at start"}
COLUMNS = ("board", "what it is", "core", "OS", "kernels", "toolchain", "emulator (here)", "flash",
           "RAM", "archive", "threads")


def _size(n: int) -> str:
    """Bytes as the board files think of them: 128 KiB, 16 MiB, 4 GiB (rounded)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.05 else f"{v:.1f} {unit}"
    return f"{n} B"


def _flag(flags: list, prefix: str) -> str | None:
    return next((f[len(prefix):] for f in flags if f.startswith(prefix)), None)


def core(board: dict) -> str:
    """The compiler's target core (-mcpu, else -march) and float ABI, from arch_flags."""
    flags = board["arch_flags"]
    if board["name"] == "host":
        return "the build machine"
    name = _flag(flags, "-mcpu=") or _flag(flags, "-march=") or board.get("zig_target", "")
    abi = _flag(flags, "-mfloat-abi=")
    if boards.soft_float(board):
        abi = "soft"
    return f"{name}, {abi} float" if abi else name


def toolchain(board: dict) -> str:
    if board.get("toolchain") == "zig":
        return f"zig cc `{board['zig_target']}` (`{board['toolchain_package']}`)"
    if not board["toolchain_prefix"]:
        return "gcc or clang"
    return f"`{board['toolchain_prefix']}gcc` (`{board['toolchain_package']}`)"


def emulator(board: dict) -> str:
    cmd = board["emulator"]["command"]
    if not cmd:
        return "native" if board["os"] == "linux" else "none: flash it"
    words = [cmd[0]]
    for opt in ("-M", "-cpu"):
        if opt in cmd:
            words += [opt, cmd[cmd.index(opt) + 1]]
    return f"`{' '.join(words)}`"


def os_cell(board: dict) -> str:
    if board["os"] == "linux":
        return "Linux (OpenWrt)" if "package" in board else "Linux"
    return f"bare metal, {board.get('console', 'semihost')} console"


def flash_cell(board: dict) -> str:
    mem = board["memory"]
    out = _size(mem["flash_bytes"])
    if "package_flash_bytes" in mem:
        out += f" ({_size(mem['package_flash_bytes'])} for the package)"
    return out


def ram_cell(board: dict) -> str:
    mem = board["memory"]
    return f"{_size(mem['ram_bytes'])} (KV {_size(mem['kv_budget_bytes'])})"


def threads_cell(board: dict) -> str:
    if board["name"] == "host":
        return "every core"
    return str(board.get("cores", 1))


def row(board: dict) -> list[str]:
    return [f"`{board['name']}`", board["description"], core(board), os_cell(board), f"`{board['kernels']}`",
            toolchain(board), emulator(board), flash_cell(board), ram_cell(board),
            PLACEMENT[board["archive"]["placement"]], threads_cell(board)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The table, one row per board file, in name order."""
    lines = [f"<!-- generated from boards/*.toml by `python -m bench.pictures boards` "
             f"(generator/build/boardtable.py): do not edit -->",
             "| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for name in boards.names():
        lines.append("| " + " | ".join(_cell(c) for c in row(boards.load(name))) + " |")
    lines += ["", "Flash and RAM are the budgets of the board file, checked after every link "
              "(Linux boards: what the engine may take; bare metal: the memory regions). "
              "KV: the KV cache budget when the archive's kv_window is 0. "
              "`auto`: the fastest x86 family the build machine runs (x86-vnni, x86), else scalar."]
    return "\n".join(lines) + "\n"
