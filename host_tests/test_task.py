"""The synthetic watch/router tool-calling task (train/task.py).

What a model trained on the "train" split and scored on the "heldout" and "novel" splits
relies on: examples are reproducible, every answer is a valid call of a tool in the example's
block, held-out and novel wordings and values never leak into training, held-out wordings use
only words the training templates use, strings to copy are really in the query, prompts fit
300 tok1k tokens, the bundled demo is in distribution, and the committed evaluation files are
what their documented commands write.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest

from generator.tools.prompt import minify_tools, render_prompt_ids
from train import task
from train.task import (
    CHITCHAT, HELDOUT_INTS, POOLS, TASKS, TEMPLATES, TOOLS, encode, example_kind,
    load_tokenizer, make_examples, number_words, target_text, tools_text,
)

ROOT = Path(__file__).resolve().parents[1]
EVAL_DIR = ROOT / "demo" / "eval"
DEMO_QUERY = "what's the weather like in Lagos right now?"
N_TRAIN = 5000


@pytest.fixture(scope="module")
def train_examples():
    return make_examples("train", N_TRAIN, 1)


@pytest.fixture(scope="module")
def drill_examples():
    return task.make_drills(3000, 1)


@pytest.fixture(scope="module")
def comma_examples():
    """Training examples with comma frames on half of the one-request and empty queries."""
    return make_examples("train", 3000, 2, comma=0.5)


@pytest.fixture(scope="module")
def train_queries(train_examples, drill_examples, comma_examples):
    """Every query a model is trained on: the examples (with and without comma frames) and
    the copy drills."""
    return [ex["query"].lower() for ex in train_examples + drill_examples + comma_examples]


@pytest.fixture(scope="module")
def heldout_examples():
    return make_examples("heldout", 300, 7)


@lru_cache(maxsize=None)
def _recipe_train(n: int, seed: int, comma: float = 0.0) -> tuple:
    """A demo recipe's training set (made once: two tests read it)."""
    return tuple(make_examples("train", n, seed, comma=comma))


@pytest.fixture(scope="module")
def novel_examples():
    return make_examples("novel", 300, 7)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def _splits(train_examples, heldout_examples, novel_examples, drill_examples=()):
    return [("train", train_examples), ("heldout", heldout_examples),
            ("novel", novel_examples)] + ([("drill", drill_examples)] if drill_examples else [])


# --------------------------------------------------------------------------- determinism

def test_same_seed_same_examples_other_seed_other_examples():
    a = make_examples("train", 200, 5)
    assert a == make_examples("train", 200, 5)
    assert make_examples("train", 50, 5) == a[:50]          # a prefix is a smaller draw
    assert a != make_examples("train", 200, 6)
    h = make_examples("heldout", 100, 5)
    assert h == make_examples("heldout", 100, 5) and h != make_examples("heldout", 100, 6)


def test_comma_frames_are_a_train_option_on_one_request_and_empty_queries(comma_examples):
    """comma=0 draws the examples of before the option (the bundled recipes' data); a frame
    goes on one-request and empty-answer queries only, keeps the calls, and is refused for
    the evaluation splits and outside [0, 1)."""
    assert make_examples("train", 500, 2, comma=0.0) == make_examples("train", 500, 2)
    framed = [ex for ex in comma_examples if any(
        ex["query"].lower().startswith(lead.lower()) for lead in task.COMMA_LEADS) or any(
        ex["query"].rstrip("?!.").endswith(close) for close in task.COMMA_CLOSES)]
    assert framed and all(len(ex["calls"]) <= 1 for ex in framed)
    single = [ex for ex in comma_examples if len(ex["calls"]) == 1]
    framed_ids = {id(ex) for ex in framed}
    assert 0.4 < sum(id(ex) in framed_ids for ex in single) / len(single) < 0.6   # comma=0.5
    for ex in framed:
        assert ex["calls"] == [] or ex["calls"][0]["name"] in {t["name"] for t in ex["tools"]}
    for bad in (dict(split="heldout", comma=0.2), dict(split="train", comma=1.0),
                dict(split="train", comma=-0.1)):
        with pytest.raises(ValueError, match="comma"):
            make_examples(bad["split"], 10, 1, comma=bad["comma"])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        make_examples("test", 1, 0)
    with pytest.raises(ValueError):
        make_examples("train", -1, 0)
    assert make_examples("train", 0, 0) == []


# --------------------------------------------------------------------------- answers

def test_every_call_is_valid_for_a_tool_in_the_block(train_examples, heldout_examples, novel_examples,
                                                      drill_examples):
    validators = {}
    for name, tool in TOOLS.items():
        cls = jsonschema.validators.validator_for(tool["parameters"])
        cls.check_schema(tool["parameters"])
        validators[name] = cls(tool["parameters"])
    for _, examples in _splits(train_examples, heldout_examples, novel_examples, drill_examples):
        for ex in examples:
            names = [tool["name"] for tool in ex["tools"]]
            assert 1 <= len(names) <= task.MAX_TOOLS and len(set(names)) == len(names)
            assert all(tool == TOOLS[tool["name"]] for tool in ex["tools"])
            assert set(ex) == {"tools", "query", "calls"}
            assert len(ex["calls"]) <= 2
            assert len({call["name"] for call in ex["calls"]}) == len(ex["calls"])
            for call in ex["calls"]:
                assert list(call) == ["name", "arguments"]
                assert call["name"] in names, ex
                schema = TOOLS[call["name"]]["parameters"]
                validators[call["name"]].validate(call["arguments"])
                # Keys in the schema's property order; integers are ints, not bools.
                assert list(call["arguments"]) == list(schema["properties"])
                for key, value in call["arguments"].items():
                    if schema["properties"][key]["type"] == "integer":
                        assert type(value) is int


def test_target_text_and_ids_follow_the_spec(heldout_examples, tok):
    ex = {"tools": [TOOLS["set_timer"]], "query": "set a timer for 25 minutes",
          "calls": [{"name": "set_timer", "arguments": {"minutes": 25}}]}
    assert target_text(ex) == ('<tool_call>[{"name":"set_timer","arguments":{"minutes":25}}]'
                               '</tool_call><|im_end|>')
    assert target_text({**ex, "calls": []}) == "<tool_call>[]</tool_call><|im_end|>"
    for ex in heldout_examples[:50]:
        prompt, target = encode(ex, tok)
        assert prompt == render_prompt_ids(tok, tools_text(ex), ex["query"])
        assert prompt[0] == tok.bos_id
        # Encoded on its own: the dummy-prefix piece, then <tool_call>; <|im_end|> then EOS.
        assert tok.id_to_piece(target[0]) == "\u2581"
        assert target[1] == tok.piece_id("<tool_call>")
        assert target[-2:] == [tok.piece_id("<|im_end|>"), tok.eos_id]
        assert tok.decode(target[:-1]) == target_text(ex)
        inner = target_text(ex)[len("<tool_call>"):-len("</tool_call><|im_end|>")]
        assert json.loads(inner) == ex["calls"]


def test_kinds_and_both_kinds_of_empty_answer(train_examples, heldout_examples, novel_examples):
    for split, examples in _splits(train_examples, heldout_examples, novel_examples):
        kinds = Counter(example_kind(ex) for ex in examples)
        share = {kind: kinds[kind] / len(examples) for kind in task.KIND_WEIGHTS}
        assert share["single"] > 0.6, (split, share)
        assert 0.08 <= share["multi"] <= 0.17, (split, share)
        assert 0.13 <= share["chitchat"] + share["unserved"] <= 0.23, (split, share)
        assert share["chitchat"] > 0.04 and share["unserved"] > 0.04, (split, share)


def test_unserved_requests_name_a_tool_missing_from_the_block(train_examples):
    """An empty answer that is not chit-chat is a filled template of a tool outside the
    block (and outside the tools it could be confused with)."""
    regexes = {name: [_template_regex(text) for text in TEMPLATES[name]["train"]]
               for name in TOOLS}
    seen = 0
    for ex in train_examples:
        if example_kind(ex) != "unserved":
            continue
        query = ex["query"][0].lower() + ex["query"][1:]
        owners = {name for name, rs in regexes.items() if any(r.fullmatch(query) for r in rs)}
        assert owners, query
        block = {tool["name"] for tool in ex["tools"]}
        # A loose template regex may match another tool's wording too ("start {activity}"
        # matches "start a call with Anna"); the true owner is one of them.
        assert any(owner not in block and not task.CONFUSABLE.get(owner, set()) & block
                   for owner in owners), ex
        seen += 1
    assert seen > 100


def test_free_strings_are_copied_verbatim(train_examples, heldout_examples, novel_examples,
                                         drill_examples):
    for _, examples in _splits(train_examples, heldout_examples, novel_examples, drill_examples):
        for ex in examples:
            for call in ex["calls"]:
                props = TOOLS[call["name"]]["parameters"]["properties"]
                for key, value in call["arguments"].items():
                    if props[key]["type"] == "string" and "enum" not in props[key]:
                        assert value in ex["query"], (value, ex["query"])


def _copied_chars(examples) -> float:
    """Characters of free strings and integers the answers copy from the query, per example."""
    total = 0
    for ex in examples:
        for call in ex["calls"]:
            props = TOOLS[call["name"]]["parameters"]["properties"]
            total += sum(len(str(v)) for k, v in call["arguments"].items()
                         if "enum" not in props[k])
    return total / len(examples)


def test_copy_drills_are_short_copy_heavy_examples(drill_examples, train_examples, tok):
    """The drills the trainer mixes in: reproducible, blocks of one or two tools, the shares
    of empty answers the module states, and answers that copy more than the main
    distribution's from prompts that are shorter."""
    assert task.make_drills(200, 1) == drill_examples[:200]
    assert task.make_drills(200, 2) != drill_examples[:200]
    assert all(1 <= len(ex["tools"]) <= task.DRILL_MAX_TOOLS for ex in drill_examples)
    kinds = Counter(example_kind(ex) for ex in drill_examples)
    n = len(drill_examples)
    chit = sum(1 for ex in drill_examples if not ex["calls"] and any(
        _template_regex(form).fullmatch(ex["query"]) for form in task.CHITCHAT_FORMS))
    assert abs(chit / n - task.DRILL_CHITCHAT) < 0.03, chit / n
    assert abs((kinds["chitchat"] + kinds["unserved"]) / n
               - task.DRILL_CHITCHAT - task.DRILL_UNSERVED) < 0.03, kinds
    assert kinds["multi"] == 0
    assert all(ex["calls"][0]["name"] in task.DRILL_TOOLS for ex in drill_examples if ex["calls"])
    assert _copied_chars(drill_examples) > 1.5 * _copied_chars(train_examples)
    length = lambda exs: sum(len(encode(ex, tok)[0]) for ex in exs[:1000]) / 1000
    assert length(drill_examples) < 0.8 * length(train_examples)


def _runs_of(needle: list, hay: list) -> bool:
    return any(hay[i:i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))


def test_aligned_targets_copy_values_in_the_querys_pieces(heldout_examples, train_examples, tok):
    """A recipe's aligned_targets: the answer is the same text, and a copied value is the
    query's pieces with the first one's space dropped ("start without me": `st art` as in the
    query's `▁st art`, not the joint encoding's `start`)."""
    ex = {"tools": [TOOLS["send_message"]], "query": "let Felix know that start without me",
          "calls": [{"name": "send_message",
                     "arguments": {"contact": "Felix", "text": "start without me"}}]}
    prompt, joint = encode(ex, tok)
    _, aligned = encode(ex, tok, aligned=True)
    pieces = [tok.id_to_piece(i) for i in aligned]
    assert pieces[pieces.index("text") + 2:pieces.index("text") + 7] == [
        "st", "art", "\u2581with", "out", "\u2581me"]
    assert "start" in [tok.id_to_piece(i) for i in joint]
    assert tok.decode(aligned[:-1]) == tok.decode(joint[:-1]) == target_text(ex)
    changed = 0
    for ex in heldout_examples + train_examples[:300]:
        prompt, joint = encode(ex, tok)
        p2, aligned = encode(ex, tok, aligned=True)
        assert p2 == prompt and aligned[-1] == tok.eos_id
        assert tok.decode(aligned[:-1]) == target_text(ex)
        assert aligned[:2] == joint[:2]                      # "▁", <tool_call>
        changed += aligned != joint
        for call in ex["calls"]:
            for value in call["arguments"].values():
                if isinstance(value, str) and " " + value in " " + ex["query"]:
                    # the value's query pieces after its first one follow in the answer too
                    ids = tok.encode(" " + value)
                    if len(ids) > 1 and _runs_of(ids, prompt):
                        assert _runs_of(ids[1:], aligned), (ex["query"], value)
    assert 0.05 < changed / 600 < 0.6, changed


def test_echo_drills_copy_a_training_passage(tok):
    """The echo drills (train.task.make_echoes): reproducible, an empty tools block (never an
    example of the task), an answer that is the query's own run of pieces, no held-out value."""
    assert all(prompt == render_prompt_ids(tok, "[]", tok.decode(target[:-1]))
               for prompt, target in task.make_echoes(100, 5, tok))      # no tails by default
    echoes = task.make_echoes(300, 5, tok, 0.5)
    assert echoes == task.make_echoes(300, 5, tok, 0.5)
    assert echoes != task.make_echoes(300, 6, tok, 0.5)
    tails = 0
    for prompt, target in echoes:
        assert target[-1] == tok.eos_id and 4 <= len(target) - 1 <= task.ECHO_MAX_PIECES
        passage = tok.decode(target[:-1])
        queries = [passage] + [f"{passage} {tail}" for tail in task.ECHO_TAILS]
        shown = [q for q in queries if prompt == render_prompt_ids(tok, "[]", q)]
        assert len(shown) == 1, passage         # the query is the passage, or it and a tail
        tails += shown[0] != passage
        assert _runs_of(target[:-1], prompt)
        assert not any(h in passage.lower() for h in task._HELDOUT_STRINGS if len(h) > 3)
        assert 4 <= len(passage.split()) <= 14
    assert abs(tails / len(echoes) - 0.5) < 0.1, tails
    assert not {tail.split()[0] for tail in task.ECHO_TAILS} & set(task._FILLER)


# --------------------------------------------------------------------------- held-out split

def _template_regex(text: str) -> re.Pattern:
    """A template as a regex: its literals as written, each placeholder any text."""
    parts = re.split(r"\{\w+(?::\w+)?\}", text)
    return re.compile("(.+?)".join(re.escape(part) for part in parts), re.IGNORECASE)


def _longest_literal(text: str) -> str:
    return max(re.split(r"\{\w+(?::\w+)?\}", text), key=len).strip().lower()


@pytest.mark.parametrize("split", ["heldout", "novel"])
def test_evaluation_phrasings_never_occur_in_train(train_queries, split):
    for name, splits in TEMPLATES.items():
        assert len(splits["train"]) + len(splits[split]) >= 6, name
        assert len(splits[split]) >= 3 and not set(splits["train"]) & set(splits[split])
        for text in splits[split]:
            core = _longest_literal(text)
            assert len(core) >= 8, text                    # long enough to mean something
            hits = [q for q in train_queries if core in q]
            assert not hits, (text, hits[:3])
            regex = _template_regex(text)
            assert not [q for q in train_queries if regex.fullmatch(q)], text
    for query in CHITCHAT["heldout"]:
        assert query.lower() not in train_queries


def _words(text: str) -> set[str]:
    """The literal words of a template (placeholders dropped), lower case."""
    literal = re.sub(r"\{\w+(?::\w+)?\}", " ", text).lower()
    return set(re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", literal))


def test_heldout_wordings_use_only_train_words():
    """The held-out split is a new wording of known words: every word of every held-out
    template occurs in some train template of the task (any tool).  The novel split is the
    one with unknown words: most of its templates have a word no train template has."""
    train_words = set().union(*(_words(t) for s in TEMPLATES.values() for t in s["train"]))
    for name, splits in TEMPLATES.items():
        for text in splits["heldout"]:
            assert _words(text) <= train_words, (name, text, _words(text) - train_words)
    novel = [t for s in TEMPLATES.values() for t in s["novel"]]
    unknown = [t for t in novel if _words(t) - train_words]
    assert len(unknown) >= 0.9 * len(novel), set(novel) - set(unknown)


def _heldout_strings() -> list[str]:
    values = [v for pool in POOLS.values() for v in pool["heldout"] if isinstance(v, str)]
    return values + [number_words(n) for n in HELDOUT_INTS if n < 100]


def test_heldout_values_never_occur_in_train(train_queries):
    for value in _heldout_strings():
        # As a word: "three" (held out) is not in "twenty-three" (a train value).
        word = re.compile(r"(?<![\w-])" + re.escape(value.lower()) + r"(?![\w-])")
        hits = [q for q in train_queries if word.search(q)]
        assert not hits, (value, hits[:3])
    for query in train_queries:
        numbers = {int(run) for run in re.findall(r"\d+", query)}
        assert not numbers & HELDOUT_INTS, query


@pytest.mark.parametrize("split", ["heldout", "novel"])
def test_evaluation_examples_use_heldout_values(split, heldout_examples, novel_examples):
    """Both evaluation splits draw their values from the held-out pools only."""
    examples = heldout_examples if split == "heldout" else novel_examples
    heldout = {v for pool in POOLS.values() for v in pool["heldout"]}
    train = {v for pool in POOLS.values() for v in pool["train"]}
    keys = {(tools_text(ex), ex["query"]) for ex in examples}
    assert len(keys) == len(examples)                     # no duplicates
    for ex in examples:
        for call in ex["calls"]:
            for key, value in call["arguments"].items():
                if key in ("room", "state", "activity"):      # enums: shared by definition
                    continue
                assert value in heldout and value not in train, (key, value)


def test_heldout_target_tokens_all_occur_in_train_targets(heldout_examples, novel_examples,
                                                          tok):
    """A model can only write a token it was trained to write: every piece of a held-out
    answer (new names, new numbers) also occurs in some answer of the demo recipe's training
    set (train/recipes/needle2-demo.json: its examples and data seed)."""
    recipe = json.loads((ROOT / "train" / "recipes" / "needle2-demo.json").read_text())
    train = _recipe_train(recipe["train"]["examples"], recipe["data_seed"],
                          recipe["train"].get("comma", 0.0))
    seen = {i for ex in train for i in tok.encode(target_text(ex))}
    for ex in heldout_examples + novel_examples:
        missing = {tok.id_to_piece(i) for i in tok.encode(target_text(ex))} - {
            tok.id_to_piece(i) for i in seen}
        assert not missing, (missing, target_text(ex))


# --------------------------------------------------------------------------- prompt and demo

@lru_cache(maxsize=None)
def _longest_encoded(n: int, seed: int, drills: int = 0, aligned: bool = False,
                     echoes: int = 0, tail_share: float = 0.0,
                     comma: float = 0.0) -> tuple[int, int]:
    """(longest prompt + answer, longest answer) in tokens over a recipe's training set, its
    drills and its echo drills (the trainer draws them with data seed + 2 and + 3; recipes
    that share them compute them once)."""
    tok = load_tokenizer()
    examples = _recipe_train(n, seed, comma) + tuple(task.make_drills(drills, seed + 2))
    lengths = [tuple(map(len, encode(ex, tok, aligned))) for ex in examples]
    lengths += [tuple(map(len, pair)) for pair in task.make_echoes(echoes, seed + 3, tok, tail_share)]
    return max(p + a for p, a in lengths), max(a for _, a in lengths)


RECIPES = sorted(path.stem for path in (ROOT / "train" / "recipes").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_example_fits_the_recipes_lengths(name):
    """The trainer refuses a run whose data outgrow seq_len/ans_len (one line, at start); a
    task change that lengthens the answers (longer invented words) must fail here, in CI,
    not an hour into retraining."""
    recipe = json.loads((ROOT / "train" / "recipes" / f"{name}.json").read_text())
    t = recipe["train"]
    drills = t.get("drills", {}).get("examples", 0)
    echoes = t.get("echo", {}).get("examples", 0)
    longest_seq, longest_answer = _longest_encoded(t["examples"], recipe["data_seed"], drills,
                                                   bool(t.get("aligned_targets")), echoes,
                                                   t.get("echo", {}).get("tail_share", 0.0),
                                                   t.get("comma", 0.0))
    assert longest_seq <= t["seq_len"] and longest_answer <= t["ans_len"], (longest_seq, longest_answer)
    assert longest_seq <= recipe["geometry"]["max_seq_len"]


def test_prompts_fit_300_tokens(train_examples, heldout_examples, novel_examples, tok):
    for examples in (train_examples[:2000], heldout_examples, novel_examples):
        for ex in examples:
            assert len(encode(ex, tok)[0]) <= 300, ex["query"]


def test_budget_table_matches_the_tokenizer(tok):
    for name, text in task._TOOL_JSON.items():
        assert task.tool_tokens()[name] == len(tok.encode(text))
        assert json.loads(text) == TOOLS[name]


def test_demo_tools_are_the_universe_tools():
    demo = json.loads((ROOT / "demo" / "tools.json").read_text(encoding="utf-8"))
    # json.dumps compares key order too.
    assert json.dumps(demo) == json.dumps([TOOLS["get_weather"], TOOLS["set_timer"]])


def test_demo_query_is_in_train_distribution(train_examples, tok):
    template = "what's the weather like in {city} right now?"
    assert template in TEMPLATES["get_weather"]["train"]
    assert "Lagos" in POOLS["cities"]["train"]
    assert template.format(city="Lagos") == DEMO_QUERY
    assert sum(task.tool_tokens()[n] for n in ("get_weather", "set_timer")) \
        <= task.TOOLS_TOKEN_BUDGET
    # The demo's prompt is the prompt of the train example with that block and query.
    demo_text = (ROOT / "demo" / "tools.json").read_text(encoding="utf-8")
    ex = {"tools": [TOOLS["get_weather"], TOOLS["set_timer"]], "query": DEMO_QUERY,
          "calls": [{"name": "get_weather", "arguments": {"city": "Lagos"}}]}
    assert tools_text(ex) == minify_tools(demo_text)
    assert encode(ex, tok)[0] == render_prompt_ids(tok, demo_text, DEMO_QUERY)
    # And the generator does use the template with its block of two.
    assert any(re.fullmatch(r"[wW]hat's the weather like in .+ right now\?", ex["query"])
               for ex in train_examples)
    assert any([t["name"] for t in ex["tools"]] == ["get_weather", "set_timer"]
               for ex in train_examples)


# --------------------------------------------------------------------------- committed eval set

def _documented_commands() -> list[list[str]]:
    readme = (EVAL_DIR / "README.md").read_text(encoding="utf-8")
    lines = re.findall(r"^python -m train\.task .*$", readme, re.MULTILINE)
    assert lines, "demo/eval/README.md does not show the commands"
    return [line.split() for line in lines]


def test_committed_eval_sets_are_the_documented_commands(tmp_path):
    commands = _documented_commands()
    assert [c[-1] for c in commands] == ["demo/eval/heldout.jsonl", "demo/eval/novel.jsonl"]
    for command, split in zip(commands, ["heldout", "novel"]):
        assert command[-2] == "-o" and command[command.index("--split") + 1] == split
        out = tmp_path / f"{split}.jsonl"
        subprocess.run([sys.executable, *command[1:-1], str(out)], cwd=ROOT, check=True)
        committed = (EVAL_DIR / f"{split}.jsonl").read_bytes()
        assert out.read_bytes() == committed, split
        examples = [json.loads(line) for line in committed.decode("utf-8").splitlines()]
        assert examples == make_examples(split, 300, 7)
