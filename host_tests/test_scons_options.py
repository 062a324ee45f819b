"""The options of the SConstruct (site_scons/needle_build/options.py) without a build: every
refusal of the command line and of an option against a board is one line, the text a user
sees after "scons: error: " (host_tests/test_scons_errors.py checks a few of them through a
real scons run), and what the checks accept they pass on (the archive, the build suffix, the
built-in tools' count, the run arguments).  Quick: nothing is compiled."""

from __future__ import annotations

import sys

import pytest

from generator.build import boards
from generator.errors import CactError
from host_tests.scons_run import ROOT

if str(ROOT / "site_scons") not in sys.path:      # where SCons finds the SConstruct's modules
    sys.path.insert(0, str(ROOT / "site_scons"))
from needle_build import options as scons_options  # noqa: E402
from needle_build.options import Refused  # noqa: E402

pytestmark = pytest.mark.quick

TOP = str(ROOT)
TINY = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
SAMPLE = "host_tests/data/eval_sample.jsonl"


def checked(**arguments):
    """check() on the options `arguments` give (values True -> "1")."""
    args = {k: ("1" if v is True else str(v)) for k, v in arguments.items()}
    opts = scons_options.values(args, TOP)
    return opts, scons_options.check(opts, TOP)


def refusal(**arguments) -> str:
    with pytest.raises(Refused) as err:
        checked(**arguments)
    message = str(err.value)
    assert "\n" not in message, message
    return message


def test_the_defaults_are_accepted_and_build_the_demo():
    opts, found = checked()
    assert opts["board"] == scons_options.DEFAULT_BOARD and opts["run"] is False and opts["flash"] == "0"
    assert found.archive == f"#{scons_options.DEMO_ARCHIVE}" and found.build_suffix == ""
    assert found.builtin_tools == 0 and found.check_dir is None and found.eval_examples is None


def test_another_archive_builds_into_its_own_suffix_and_the_demo_by_path_does_not():
    assert checked(archive=TINY)[1].build_suffix == "-archive"
    assert checked(archive=scons_options.DEMO_ARCHIVE)[1].build_suffix == ""


def test_a_tool_list_is_counted():
    import json
    listed = json.loads((ROOT / "host_tests" / "data" / "tools12.json").read_text())
    assert checked(tools="host_tests/data/tools12.json")[1].builtin_tools == len(listed) == 12


def test_the_settings_file_gives_options_and_the_command_line_wins(tmp_path):
    settings = tmp_path / "s.py"
    settings.write_text('board = "watch-m4"\nverbose = True\n')
    opts = scons_options.values({"settings": str(settings)}, TOP)
    assert opts["board"] == "watch-m4" and opts["verbose"] is True
    assert scons_options.values({"settings": str(settings), "board": "host"}, TOP)["board"] == "host"


@pytest.mark.parametrize("arguments, text", [
    ({"bogus": "1", "other": "2"}, "unknown option(s) bogus, other (see scons -h)"),
    ({"board": "nope"}, "Invalid value for enum variable 'board': 'nope'. Valid values are: "),
    ({"run": "maybe"}, "Error converting option: 'run' (see scons -h)"),
    ({"flash": "2"}, "Invalid value for enum variable 'flash': '2'"),
    ({"settings": "/nonexistent/s.py"}, "settings=/nonexistent/s.py does not exist (pass a Python file of "
                                        "KEY = VALUE lines, like custom.py)"),
    ({"query": "hi"}, "query= goes with run=1 (or gdb=1): the query the engine answers"),
    ({"board": "all", "gdb": True}, "gdb=1 debugs one board: pass board=NAME"),
    ({"board": "all", "flash": "dry"}, "flash=dry programs one board: pass board=NAME"),
    ({"probe": "pyocd"}, "probe=pyocd goes with flash=1 or flash=dry"),
    ({"kv_window": "x"}, "kv_window=x must be a positive integer"),
    ({"kv_window": "0"}, "kv_window=0 must be a positive integer"),
    ({"bench_tokens": "0"}, "bench_tokens=0 must be a positive integer"),
    ({"head_tokens": "-1"}, "head_tokens=-1 must be a non-negative integer"),
    ({"gdb_port": "x"}, "gdb_port=x must be a positive integer"),
    ({"threads": "0"}, "threads=0 must be a positive integer"),
    ({"thread_grain": " 1"}, "thread_grain= 1 must be a non-negative integer"),
    ({"prefill_chunk": "0"}, "prefill_chunk=0 must be a positive integer"),
    ({"archive": "/nonexistent.cact"}, "archive=/nonexistent.cact does not exist (pass the path of a .cact file)"),
    ({"check_tol": "2"}, "check_tol=2 goes with check=DIR"),
    ({"eval_limit": "3"}, "eval_limit=3 goes with eval=1"),
    ({"eval_data": SAMPLE}, f"eval_data={SAMPLE} goes with eval=1"),
    ({"eval": True, "board": "all"}, "eval=1 evaluates one board: pass board=NAME"),
    ({"eval": True, "kv_window": "4"}, "eval=1 compares with the reference at the archive's own KV window: "
                                      "drop kv_window=4"),
    ({"eval": True, "eval_data": SAMPLE, "eval_limit": "x"}, "eval_limit=x must be a positive integer"),
    ({"eval": True, "eval_data": SAMPLE, "eval_max_new": "0"}, "eval_max_new=0 must be a positive integer"),
    ({"eval": True, "eval_data": "/nonexistent.jsonl"}, "eval_data=/nonexistent.jsonl does not exist (pass a "
                                                       "JSON-lines file of held-out examples)"),
    ({"tools": "/nonexistent.json"}, "tools=/nonexistent.json does not exist (pass a JSON tool list, "
                                     "e.g. tools=demo/tools.json)"),
    ({"tools": "/dev/null"}, "tools=/dev/null is not a regular file"),
])
def test_a_refused_command_line(arguments, text):
    assert text in refusal(**arguments)


def test_paths_that_are_files_or_directories_in_the_wrong_place(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    assert refusal(build=f / "sub") == (f"build={f / 'sub'}: {f} is a file, not a directory (pass a directory "
                                        "for the build outputs, e.g. build=build/mine)")
    assert refusal(cache=f) == (f"cache={f}: {f} is a file, not a directory (pass a directory for the build "
                                "cache, e.g. cache=~/.cache/needle-fw)")
    assert refusal(archive=tmp_path) == (f"archive={tmp_path} is a directory (pass the path of a .cact file, "
                                         f"e.g. archive={tmp_path / 'model.cact'})")
    assert refusal(tools=tmp_path).startswith(f"tools={tmp_path} is a directory")


@pytest.mark.parametrize("content, text", [
    (b"\xff\xfe[]", "is not UTF-8 text (pass a JSON tool list)"),
    (b"[]", "is an empty tool list: a built-in list needs at least one tool (drop tools= to pass --tools FILE"),
    (b"{", ": "),
])
def test_a_refused_tool_list(tmp_path, content, text):
    tools = tmp_path / "tools.json"
    tools.write_bytes(content)
    message = refusal(tools=tools)
    assert message.startswith(f"tools={tools}") and text in message


def test_check_dir_refusals(tmp_path):
    assert refusal(check=tmp_path, check_tol="-1") == "check_tol=-1 must be a non-negative number (0: bit-identical)"
    assert refusal(check=tmp_path, check_tol="nan").startswith("check_tol=nan must be")
    assert refusal(check=tmp_path, kv_window="8") == ("check= compares with the reference at the archive's own "
                                                      "KV window: drop kv_window=8")
    assert refusal(check=tmp_path).startswith(f"check={tmp_path}: ")       # no cases.json there


def test_eval_reads_its_examples():
    _, found = checked(eval=True, eval_data=SAMPLE, eval_limit="2")
    assert found.eval_data == SAMPLE and len(found.eval_examples) == 2


# ---- each board ---------------------------------------------------------------------------------

def board_refusal(name: str, exception=Refused, **arguments) -> str:
    opts, found = checked(**arguments)
    with pytest.raises(exception) as err:
        scons_options.check_board(opts, found, boards.load(name))
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.fixture()
def tools_everywhere(monkeypatch):
    """Every board's compiler and emulator found: the refusals after that check."""
    monkeypatch.setattr(boards, "missing_tools", lambda board, cc="gcc", run=False: None)


def test_a_board_the_options_fit():
    opts, found = checked(board="host", run=True, query="hello")
    choice = scons_options.check_board(opts, found, boards.load("host"))
    assert choice.board["name"] == "host" and choice.family == boards.kernel_family(choice.board)
    assert choice.threads == boards.default_threads(choice.board)
    args = scons_options.run_arguments(choice.board, "say $(x)")
    assert args[args.index("--query") + 1] == "say $(x)" and args[:2] == ["--tools", "demo/tools.json"]


@pytest.mark.parametrize("name, arguments, text", [
    ("host", {"uf2": True}, "board host is not an RP2350: a UF2 image is for a boot ROM"),
    ("host", {"kernels": "mve"}, "kernels=mve is Arm Cortex-M code and board host is x86-64: choose one of "),
    ("rpi-zero", {"sanitize": True}, "sanitize=1 is for board=host"),
    ("watch-m4", {"threads": "2"}, "threads=2: board watch-m4 is bare metal and its engine runs on one core "
                                   "(drop threads=)"),
    ("watch-m4-uart", {"run": True, "query": "hi"}, "query= is for a board with host files: board watch-m4-uart "
                                                   "reads its command line on the UART console"),
    ("watch-m4-uart", {"eval": True, "eval_data": SAMPLE}, "so it cannot read each example's tools: build it with "
                                                          "tools=FILE"),
])
def test_a_board_the_options_do_not_fit(tools_everywhere, name, arguments, text):
    assert text in board_refusal(name, **arguments)


def test_flash_and_sign_are_refused_on_a_linux_board(tools_everywhere, tmp_path):
    from generator.build import flash, mcuboot
    host = boards.load("host")
    assert board_refusal("host", flash="dry") == flash.refusal(host, "board", dry=True)
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    assert board_refusal("host", sign=key) == mcuboot.refusal(host, str(key))
    assert flash.refusal(host, "board", dry=True).startswith("board host runs Linux: copy the executable")
    assert mcuboot.refusal(host, str(key)).startswith("sign= makes an MCUboot image of bare-metal firmware")


def test_a_board_that_calls_only_built_in_tools_needs_them(tools_everywhere, monkeypatch):
    from generator.tools import tables
    monkeypatch.setattr(tables, "runtime", lambda board: False)
    assert board_refusal("host") == ("board host calls only built-in tools ([grammar] runtime = false in "
                                     "boards/host.toml): pass tools=FILE")
    many = "host_tests/data/tools12.json"
    assert "retrieval renders five of the 12 built-in tools" in board_refusal("host", tools=many, head_tokens="8")


@pytest.mark.parametrize("name, arguments, text", [
    ("router-mt7621", {"package": "ipk", "feed_key": "k"}, "feed_key= signs an opkg feed: add package=feed"),
    ("host", {"package": "ipk"}, "board host is not an OpenWrt board (no [package] openwrt_arch): package=ipk"),
    ("host", {"package": "deb"}, "board host is not a Debian board (no [deb] architecture): package=deb is for "),
])
def test_a_package_the_board_cannot_have(tools_everywhere, name, arguments, text):
    assert text in board_refusal(name, CactError, **arguments)
