"""The boot-time archive SHA-256 as a HAL hook (issue 49 item 4): a partition board's engine
hashes its whole archive at boot through hal_sha256, defined weak in the engine (the software
FIPS 180-4 hash); a board file's sha256 = "rp2350" | "stm32h7" links the chip's accelerator
driver (firmware/hal/sha256/) in its place, in the needle firmware and in a user's program on
the SDK.  Under QEMU (watch-m7, a partition board): the default boots, and a program that
overrides the hook is what the engine calls.  The two accelerator drivers are built and
linked here, never run: no RP2350 or STM32H7 is attached and QEMU models neither."""

from __future__ import annotations

import re
import subprocess

import pytest

from generator.build import boards, sdk
from host_tests.scons_run import ROOT, scons

ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
ACCELERATED = {"stm32h750b-dk": "sha256_stm32h7.o", "rp2350-pico-plus2-mcuboot": "sha256_rp2350.o"}

pytestmark = pytest.mark.skipif(boards.missing_tools(boards.load("watch-m4")) is not None,
                                reason="needs arm-none-eabi-gcc")

APP = r"""
#include <string.h>
#include "needle.h"
#include "needle_hal.h"
static void say(const char *s) { hal_out(s, strlen(s)); }
int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    if (needle_boot()) { say("boot failed: "); say(needle_error()); say("\n"); return 3; }
    say("booted\n");
    return 0;
}
"""
OVERRIDE = r"""
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "needle_hal.h"
void hal_sha256(const uint8_t *data, size_t n, uint8_t out[32])
{
    (void)data; (void)n;
    hal_out("hook\n", 5);
    memset(out, 0, 32);            /* not the archive's digest: boot must refuse */
}
"""


def link(sdk_dir, tmp_path, sources: list[str], name: str):
    pc = {"PKG_CONFIG_LIBDIR": str(sdk_dir / "lib" / "pkgconfig"), "PATH": subprocess.os.environ["PATH"]}

    def pkg(*args):
        return subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=pc, check=True).stdout.split()
    files = []
    for i, text in enumerate(sources):
        f = tmp_path / f"{name}{i}.c"
        f.write_text(text)
        files.append(str(f))
    out = tmp_path / name
    proc = subprocess.run([pkg("--variable=cc", "needle")[0], "-std=c11", "-O2", *pkg("--cflags", "needle-board"), "-o",
                           str(out), *files, *pkg("--libs", "needle-board"), f"-Wl,-Map={out}.map"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def provider(map_text: str) -> str:
    """The object whose .text.hal_sha256 the link kept (a discarded one sits at address 0)."""
    kept = re.findall(r"\.text\.hal_sha256\s+0x0*([0-9a-f]+)\s+0x[0-9a-f]+\s+(\S+)", map_text)
    live = [obj for addr, obj in kept if int(addr, 16)]
    assert len(live) == 1, kept
    return live[0].rsplit("/", 1)[-1].split("(")[-1].rstrip(")")


@pytest.fixture(scope="module")
def m7(tmp_path_factory):
    out = tmp_path_factory.mktemp("hook") / "watch-m7"
    scons("board=watch-m7", f"archive={ARCHIVE}", f"build={out}", "lib=1")
    return out


def test_default_is_the_software_hash(m7, tmp_path, board_runner):
    """No accelerator: the engine's own weak hal_sha256 is the one linked, and it accepts the
    archive (test_partition.py refuses damaged ones with it)."""
    assert provider((m7 / "needle.map").read_text()) == "needle_model.o"
    sdk_dir = m7 / sdk.SDK_DIR
    program = link(sdk_dir, tmp_path, [APP], "app")
    assert provider(program.with_suffix(".map").read_text()).startswith("needle_model.o")
    got = board_runner("watch-m7", program, sdk_dir / "share" / "needle" / "archive.bin").run([], cwd=tmp_path,
                                                                                              timeout=300)
    assert got.returncode == 0 and got.stdout == "booted\n", got.stdout + got.stderr


def test_a_board_override_is_what_boot_calls(m7, tmp_path, board_runner):
    sdk_dir = m7 / sdk.SDK_DIR
    program = link(sdk_dir, tmp_path, [APP, OVERRIDE], "hooked")
    got = board_runner("watch-m7", program, sdk_dir / "share" / "needle" / "archive.bin").run([], cwd=tmp_path,
                                                                                              timeout=300)
    assert got.returncode == 3, got.stdout + got.stderr
    assert got.stdout.startswith("hook\nboot failed: the archive partition is not the archive this engine was "
                                 "generated for"), got.stdout


@pytest.mark.parametrize("name", sorted(ACCELERATED))
def test_accelerator_replaces_the_software_hash(name, tmp_path):
    """The board's driver is the hal_sha256 of the needle firmware and of a user's program on
    its SDK (needle-board.pc names it, so the archive member is pulled in before libneedle.a's
    weak one)."""
    board = boards.load(name)
    assert "sha256" in board and board["archive"]["placement"] == "partition"
    out = tmp_path / name
    scons(f"board={name}", f"archive={ARCHIVE}", f"build={out}", "lib=1")
    assert provider((out / "needle.map").read_text()) == ACCELERATED[name]
    sdk_dir = out / sdk.SDK_DIR
    assert "-Wl,--undefined=hal_sha256" in (sdk_dir / "lib" / "pkgconfig" / "needle-board.pc").read_text()
    program = link(sdk_dir, tmp_path, [APP], "app")
    assert provider(program.with_suffix(".map").read_text()).startswith(ACCELERATED[name])


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('sha256 = "stm32h7"', 'sha256 = "stm32f4"'), "sha256 (a hash accelerator for the boot-time"),
])
def test_board_file_checks_the_accelerator(board_error, edit, message):
    assert message in board_error("stm32h750b-dk", edit)


def test_accelerator_needs_a_partition_board(board_error):
    msg = board_error("rp2350-pico-plus2", lambda t: t.replace('console = "uart"', 'console = "uart"\nsha256 = "rp2350"'))
    assert "on a bare-metal board whose archive is a partition" in msg
