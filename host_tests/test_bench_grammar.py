"""bench/grammar.py's two pieces that are not emulator runs: the split of a constrained turn's
cost into the model's and the grammar's, and the attribution of a linked image's static
memory to the object files (by object, never by a list of symbol names)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from bench.grammar import split_costs, tool_memory
from generator.errors import CactError


def test_split_subtracts_the_same_decoding_without_the_grammar():
    # raw: 1,000 start-up + 100 per token; the constrained turn adds 5,000 once and 30 per token
    c = split_costs(1000 + 100 * 10 + 5000 + 30 * 10, 1000 + 100 * 10, 1000 + 100, 10, 10, setup=5000)
    assert c["model_per_token"] == 100
    assert c["grammar_total"] == 5300 and c["grammar_per_token"] == 530
    assert c["grammar_per_token_after_setup"] == 30 and c["grammar_vs_model"] == 5.3
    assert not c["extrapolated"]
    assert split_costs(2000, 1500, 1100, 4, 4)["grammar_per_token_after_setup"] is None


def test_split_extrapolates_the_model_when_it_chose_eos_early():
    # the raw run stopped after 6 of 10 tokens: the model's 10 are 1,100 + 9 x 100
    c = split_costs(1000 + 100 * 10 + 300, 1000 + 100 * 6, 1000 + 100, 10, 6)
    assert c["model_per_token"] == 100 and c["grammar_total"] == 300 and c["extrapolated"]
    with pytest.raises(CactError, match="EOS"):
        split_costs(5000, 1100, 1100, 10, 1)


SOURCES = {
    # the same static name in two objects, a global, a constant, a function each
    "needle_tool_call.c": "static char buf[300]; int calls = 1; const char table[40] = {1};\n"
                          "char *tool_buf(void) { buf[0] = table[0]; return buf; }\n",
    "other.c": "static char buf[7000]; char *other_buf(void) { return buf; }\n",
    "main.c": "char *tool_buf(void); char *other_buf(void); static char ids[64];\n"
              "int main(void) { ids[1] = 2; return tool_buf()[0] + other_buf()[0] + ids[1]; }\n",
}


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs the host gcc")
def test_memory_is_grouped_by_the_object_file(tmp_path):
    obj = tmp_path / "obj"
    obj.mkdir()
    for name, text in SOURCES.items():
        (tmp_path / name).write_text(text)
        subprocess.run(["gcc", "-O1", "-fno-common", "-c", str(tmp_path / name), "-o", str(obj / name.replace(".c", ".o"))],
                       check=True)
    image = tmp_path / "prog"
    subprocess.run(["gcc", "-o", str(image), *sorted(map(str, obj.glob("*.o")))], check=True)
    mem = tool_memory(image, obj)
    call, main = mem["objects"]["needle_tool_call"], mem["objects"]["main"]
    assert (call["bss"], call["data"], call["rodata"]) == (300, 4, 40)      # other.c's buf is not ours
    assert call["symbols"] == {"buf": 300, "calls": 4} and call["text"] > 0
    assert main["bss"] == 64 and main["text"] > 0
    assert mem["objects"]["needle_tool_grammar"] is None                     # not in this build
    assert "other" not in mem["objects"]
    assert mem["total"]["ram"] == 300 + 4 + 64 and mem["image_ram"] >= 300 + 4 + 64 + 7000
