"""The trainer end to end on a toy recipe (issue 15 item 2): it trains, exports an archive
the project's reader accepts and the reference runs, and the same recipe gives the same bytes
(training is reproducible from the recipe's seeds).

Needs the trainer's packages (pip install -r train/requirements.txt; .ci/run installs them).
"""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("jax", reason="the trainer's packages: pip install -r train/requirements.txt")

from generator.archive import reader  # noqa: E402
from generator.model.needle2 import Needle2  # noqa: E402
from train import train as T  # noqa: E402

TOY = {
    "generation": 2,
    "geometry": {"vocab": 1024, "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
                 "num_layers": 1, "max_seq_len": 384, "mhc_lanes": 4, "engram_slots": 64,
                 "engram_sub_dim": 16, "num_engram_tables": 4, "engram_orders": [2, 3],
                 "engram_sites": [0], "kv_window": 0},
    "tokenizer": "tok1k.model", "init_seed": 3, "data_seed": 11,
    "train": {"examples": 48, "heldout_examples": 8, "seq_len": 352, "ans_len": 72, "batch": 4,
              "steps": 2, "qat_steps": 1, "warmup": 1, "lr": 0.001, "weight_decay": 0.01, "bits": 4,
              "log_every": 10, "buckets": [352]},
}


def test_toy_recipe_trains_exports_and_reproduces(tmp_path):
    lines = []
    first = T.run(copy.deepcopy(TOY), tmp_path / "a.cact", log=lines.append)
    second = T.run(copy.deepcopy(TOY), tmp_path / "b.cact", log=lambda _: None)
    a = (tmp_path / "a.cact").read_bytes()
    assert a == (tmp_path / "b.cact").read_bytes()
    assert first["sha256"] == second["sha256"] and first["bytes"] == len(a)
    assert [row["step"] for row in first["history"]] == [2, 3]       # each phase logs its last step
    assert any("held-out exact" in line for line in lines)
    archive = reader.read(a)
    assert archive.header["d_model"] == 64 and archive.header["num_layers"] == 1
    logits = Needle2(archive, "a8").logits([2, 5, 9])
    assert logits.shape == (3, 1024)


def test_an_example_longer_than_the_recipe_allows_is_refused(tmp_path):
    toy = copy.deepcopy(TOY)
    toy["train"]["seq_len"] = 40
    with pytest.raises(SystemExit, match="raise seq_len/ans_len in the recipe"):
        T.run(toy, tmp_path / "x.cact", log=lambda _: None)
    assert not (tmp_path / "x.cact").exists()


def test_drills_are_mixed_in_at_the_recipes_share(tmp_path):
    """A recipe's `drills` (train.task.make_drills) take their share of the steps, from
    their own length buckets; a share outside (0, 1) is refused in one line."""
    toy = copy.deepcopy(TOY)
    toy["train"].update(steps=12, qat_steps=0, buckets=[224, 352])
    toy["train"]["drills"] = {"examples": 16, "share": 0.5, "buckets": [160, 224]}
    report = T.run(toy, tmp_path / "d.cact", log=lambda _: None)
    assert 0 < report["drill_steps"] < 12
    assert reader.read((tmp_path / "d.cact").read_bytes()).header["d_model"] == 64
    toy["train"]["drills"]["share"] = 1.5
    with pytest.raises(SystemExit, match="drills share must be between 0 and 1"):
        T.run(toy, tmp_path / "e.cact", log=lambda _: None)
    assert not (tmp_path / "e.cact").exists()


def test_echoes_take_their_share_of_the_first_steps(tmp_path):
    """A recipe's `echo` (train.task.make_echoes) draws only within its first `steps`, about
    its share of them; aligned_targets changes the answers' split, not what trains; a bad
    echo is refused in one line."""
    toy = copy.deepcopy(TOY)
    toy["train"].update(steps=12, qat_steps=0, buckets=[224, 352], aligned_targets=True)
    toy["train"]["echo"] = {"examples": 16, "steps": 6, "share": 0.99, "buckets": [128, 160]}
    report = T.run(toy, tmp_path / "c.cact", log=lambda _: None)
    assert report["echo_steps"] == 6
    toy["train"]["echo"]["steps"] = 0
    with pytest.raises(SystemExit, match="echo needs a share between 0 and 1 and steps > 0"):
        T.run(toy, tmp_path / "f.cact", log=lambda _: None)
    assert not (tmp_path / "f.cact").exists()


def test_prompt_loss_and_weight_average_are_recipe_options(tmp_path):
    """`prompt_loss` adds the prompt's next-token loss (tried for the demo, not kept: train/
    README.md); `ema` exports a moving average of the weights and `raw_out` the last ones.
    The prompt loss changes what is learnt, the average differs from the last weights, and a
    bad value of either is refused in one line."""
    toy = copy.deepcopy(TOY)
    toy["train"].update(steps=3, qat_steps=0)
    plain = T.run(copy.deepcopy(toy), tmp_path / "plain.cact", log=lambda _: None)
    lm = copy.deepcopy(toy)
    lm["train"]["prompt_loss"] = {"weight": 0.5, "tokens": 16}
    with_lm = T.run(lm, tmp_path / "lm.cact", log=lambda _: None)
    assert with_lm["sha256"] != plain["sha256"]
    lm["train"]["ema"] = 0.5
    averaged = T.run(lm, tmp_path / "ema.cact", log=lambda _: None, raw_out=tmp_path / "raw.cact")
    raw = (tmp_path / "raw.cact").read_bytes()
    assert averaged["sha256"] != with_lm["sha256"]          # the average is what is exported
    assert raw == (tmp_path / "lm.cact").read_bytes()       # and the last weights are the run's
    assert "heldout_seq_acc_raw" in averaged["history"][-1]
    for key, value, message in (("ema", 1.0, "ema must be in"),
                                ("prompt_loss", {"weight": 0.0, "tokens": 8}, "prompt_loss needs")):
        bad = copy.deepcopy(toy)
        bad["train"][key] = value
        with pytest.raises(SystemExit, match=message):
            T.run(bad, tmp_path / "bad.cact", log=lambda _: None)
    assert not (tmp_path / "bad.cact").exists()


def test_raw_out_without_a_weight_average_is_refused(tmp_path, capsys):
    """--raw-out only means something with "ema": without it the run is refused in one line
    before any training, and nothing is written."""
    recipe = tmp_path / "toy.json"
    recipe.write_text(json.dumps(TOY))
    rc = T.main(["--recipe", str(recipe), "-o", str(tmp_path / "x.cact"), "--raw-out", str(tmp_path / "r.cact")])
    err = capsys.readouterr().err
    assert rc == 2 and "--raw-out" in err and "ema" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.cact").exists() and not (tmp_path / "r.cact").exists()
