"""Train a tiny Needle 2 or Needle 3 on the synthetic tool-calling task and export it as a
.cact archive.

    python -m train.train --recipe train/recipes/needle2-demo.json -o demo/needle2-demo.cact
    python -m train.train --recipe train/recipes/needle3-demo.json -o demo/needle3-demo.cact

The recipe's "generation" (2 when absent) picks the model: train/model.py or train/model3.py.

Everything that decides the result is in the recipe (geometry, seeds, data, schedule), so the
same recipe on the same kind of machine gives the same archive.  Training sequences are
`[BOS] + prompt + target + [EOS]` with the loss on the target and EOS only (docs/spec/
prompt-and-tokenizer.md §4.3).  Progress is one line per `log_every` steps: the loss, and the
held-out sequence accuracy under teacher forcing, which is exactly the share of held-out
examples whose unconstrained greedy answer equals the target token for token (every
position's arg-max equals the next target token iff greedy decoding reproduces the target).

A recipe's optional `drills` ({"examples", "share", "buckets"}) mixes short copy-heavy
examples (train/task.py make_drills) into that share of the steps, from their own length
buckets; the report counts the steps that drew them (`drill_steps`).  An optional `echo`
({"examples", "steps", "share", "buckets", "tail_share"}) draws echo drills (train/task.py make_echoes:
copy the query back, piece for piece) in that share of the first `steps` steps
(`echo_steps`), and `aligned_targets` writes every value copied from the query with the
query's own pieces (task.aligned_target_ids; the same text, another split).

The optional last phase is quantisation-aware: the forward pass sees every matrix through the
CQ round trip of the format (straight-through gradient), so the exported 4-bit archive keeps
the float model's accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from generator.archive.format import CQ
from generator.archive import roles as R
from generator.commands.synth import _n2, _n3
from generator.model.geometry import stored_kv_window
from train import export as X
from train import model as M
from train import model3 as M3
from train import quant_jax as QJ
from train import task


def header(geo: dict, generation: int = 2) -> dict:
    """A Needle 2 or 3 header from the recipe's geometry (the synthesiser's header builders;
    the stored kv_window is the budget window capped by the configured one, 0 = none)."""
    if generation == 3:
        return _n3(geo["vocab"], geo["out_vocab"], geo["d_model"], geo["num_heads"],
                   geo["num_kv_heads"], geo["qk_head_dim"], geo["v_head_dim"], geo["num_layers"],
                   geo["max_seq_len"], geo["mhc_lanes"], geo["sliding_window"],
                   tuple(geo["global_layers"]), geo["qkv_conv_taps"], geo["engram_slots"],
                   geo["engram_sub_dim"], geo["num_engram_tables"], tuple(geo["engram_orders"]),
                   tuple(geo["engram_sites"]), geo["kv_window"],
                   seed_heads=geo.get("engram_seed_heads", 0))
    if generation != 2:
        raise SystemExit(f"train: generation {generation} is not 2 or 3")
    hdr = _n2(geo["vocab"], geo["d_model"], geo["num_heads"], geo["num_kv_heads"], geo["head_dim"],
              geo["num_layers"], geo["max_seq_len"], geo["mhc_lanes"], geo["engram_slots"],
              geo["engram_sub_dim"], geo["num_engram_tables"], tuple(geo["engram_orders"]),
              tuple(geo["engram_sites"]), geo["kv_window"])
    # stored as Needle 3's is: the window the engine sizes to (the budget window, capped by a
    # configured one), never 0, which makes every build warn "header kv_window is 0"
    hdr["kv_window"] = stored_kv_window(hdr, geo["kv_window"])
    return hdr


# ---- data --------------------------------------------------------------------------

class Batches:
    """Encoded examples packed into fixed-shape arrays (one jit shape for the whole run)."""

    def __init__(self, examples: list, tok, seq_len: int, ans_len: int, aligned: bool = False,
                 lm_len: int = 0):
        """``examples``: task examples (encoded by task.encode) or ``(prompt_ids, target_ids)``
        pairs already encoded (task.make_echoes).  ``lm_len`` (a recipe's ``prompt_loss``):
        also keep the positions of the prompt's last ``lm_len`` next-token predictions (the
        query and the turn's closing template), for an auxiliary language-model loss."""
        self.seq_len, self.ans_len, self.lm_len = seq_len, ans_len, lm_len
        n = len(examples)
        self.tokens = np.zeros((n, seq_len), np.int32)
        self.where = np.zeros((n, ans_len), np.int32)    # positions whose logits predict the target
        self.mask = np.zeros((n, ans_len), np.float32)
        self.lm_where = np.zeros((n, lm_len), np.int32)  # positions predicting prompt tokens
        self.lm_mask = np.zeros((n, lm_len), np.float32)
        for i, ex in enumerate(examples):
            prompt, target = ex if isinstance(ex, tuple) else task.encode(ex, tok, aligned)
            seq = prompt + target
            if len(seq) > seq_len or len(target) > ans_len:
                raise SystemExit(f"train: example {i} needs {len(seq)} tokens ({len(target)} in the "
                                 f"answer); raise seq_len/ans_len in the recipe")
            self.tokens[i, :len(seq)] = seq
            k = len(target)
            self.where[i, :k] = np.arange(len(prompt) - 1, len(seq) - 1)
            self.mask[i, :k] = 1.0
            if lm_len:
                lo = max(0, len(prompt) - 1 - lm_len)
                m = len(prompt) - 1 - lo
                self.lm_where[i, :m] = np.arange(lo, len(prompt) - 1)
                self.lm_mask[i, :m] = 1.0

        self.lengths = (self.tokens != 0).sum(axis=1)

    def __len__(self) -> int:
        return len(self.tokens)

    def buckets(self, edges) -> list:
        """Example indices grouped by the shortest edge their sequence fits in: a batch drawn
        from one bucket is cut to that edge, so short prompts do not pay for the longest."""
        out, lo = [], 0
        for edge in edges:
            idx = np.flatnonzero((self.lengths > lo) & (self.lengths <= edge))
            if len(idx):
                out.append((edge, idx))
            lo = edge
        return out

    def bucket_weights(self, edges) -> tuple[list, np.ndarray]:
        """The buckets of ``edges`` and the chance of drawing each: its share of the examples."""
        sets = self.buckets(edges)
        weights = np.array([len(i) for _, i in sets], np.float64)
        return sets, weights / weights.sum()

    def take(self, idx: np.ndarray, geo, width: int | None = None):
        toks = self.tokens[idx][:, :width or self.seq_len]
        rows, valid = model_of(geo).engram_rows(geo, toks)
        out = (jnp.asarray(toks), jnp.asarray(rows), jnp.asarray(valid),
               jnp.asarray(self.where[idx]), jnp.asarray(self.mask[idx]))
        if self.lm_len:
            out += (jnp.asarray(self.lm_where[idx]), jnp.asarray(self.lm_mask[idx]))
        return out


# ---- objective ----------------------------------------------------------------------

def model_of(geo):
    """The model module a geometry belongs to."""
    return M3 if isinstance(geo, M3.Geometry3) else M


def logits_at(geo, p, z, where):
    """Logits [B, A, V_out] of hidden states ``z`` at positions ``where`` only (the head is a
    fifth of the work)."""
    return model_of(geo).logits_of(p, jnp.take_along_axis(z, where[..., None], axis=1), geo.V_out)


def answer_logits(geo, p, toks, rows, valid, where):
    """Logits [B, A, V_out] at the answer positions."""
    return logits_at(geo, p, model_of(geo).hidden(geo, p, toks, rows, valid), where)


def targets_of(toks, where):
    return jnp.take_along_axis(toks, where + 1, axis=1)


def _nll(geo, p, z, toks, where, mask):
    """Mean next-token loss at positions ``where`` (weights ``mask``) of hidden states ``z``."""
    lp = jax.nn.log_softmax(logits_at(geo, p, z, where), axis=-1)
    nll = -jnp.take_along_axis(lp, targets_of(toks, where)[..., None], axis=-1)[..., 0]
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def loss_fn(p, geo, toks, rows, valid, where, mask, lm_where=None, lm_mask=None, lm_weight=0.0):
    """The answer's loss (spec section 4.3), plus ``lm_weight`` times the prompt's next-token
    loss at ``lm_where`` when a recipe asks for it (``prompt_loss``)."""
    z = model_of(geo).hidden(geo, p, toks, rows, valid)
    loss = _nll(geo, p, z, toks, where, mask)
    if lm_where is not None and lm_weight:
        loss = loss + lm_weight * _nll(geo, p, z, toks, lm_where, lm_mask)
    return loss


def seq_correct(p, geo, toks, rows, valid, where, mask, *_lm):
    """Per example: does every answer position's arg-max equal the next target token?"""
    lg = answer_logits(geo, p, toks, rows, valid, where)
    ok = (jnp.argmax(lg, axis=-1) == targets_of(toks, where)) | (mask == 0)
    return jnp.all(ok, axis=-1)


# ---- the run ---------------------------------------------------------------------------

def run(recipe: dict, out: Path, log=print, raw_out: Path | None = None) -> dict:
    t_start = time.time()
    gen = recipe.get("generation", 2)
    hdr = header(recipe["geometry"], gen)
    mod = M3 if gen == 3 else M
    geo = M3.Geometry3.from_header(hdr) if gen == 3 else M.Geometry.from_header(hdr)
    tr = recipe["train"]
    tok = task.load_tokenizer()
    try:   # comma frames (task._comma_frame); make_examples checks the share
        train_ex = task.make_examples("train", tr["examples"], recipe["data_seed"],
                                      comma=tr.get("comma", 0.0))
    except ValueError as exc:
        raise SystemExit(f"train: {exc}") from None
    held_ex = task.make_examples("heldout", tr["heldout_examples"], recipe["data_seed"] + 1)
    seq_len, ans_len = tr["seq_len"], tr["ans_len"]
    aligned = bool(tr.get("aligned_targets", False))   # copied values in the query's pieces
    prompt_loss = tr.get("prompt_loss")   # auxiliary next-token loss on the prompt's end
    lm_len = int(prompt_loss["tokens"]) if prompt_loss else 0
    lm_weight = float(prompt_loss["weight"]) if prompt_loss else 0.0
    if prompt_loss and not (lm_len > 0 and lm_weight > 0):
        raise SystemExit(f"train: prompt_loss needs tokens > 0 and weight > 0, not {prompt_loss}")
    ema = float(tr.get("ema", 0.0))        # exported weights: an exponential moving average
    if not 0.0 <= ema < 1.0:
        raise SystemExit(f"train: ema must be in [0, 1), not {ema}")
    train_b = Batches(train_ex, tok, seq_len, ans_len, aligned, lm_len)
    held_b = Batches(held_ex, tok, seq_len, ans_len, aligned)
    drills = tr.get("drills")       # short copy-heavy examples mixed in (task.make_drills)
    if drills and not 0.0 < drills.get("share", 0.0) < 1.0:
        raise SystemExit(f"train: drills share must be between 0 and 1, not {drills.get('share')}")
    drill_b = (Batches(task.make_drills(drills["examples"], recipe["data_seed"] + 2), tok,
                       seq_len, ans_len, aligned, lm_len) if drills else None)
    echo = tr.get("echo")           # echo drills in the first steps (task.make_echoes)
    if echo and not (0.0 < echo.get("share", 0.0) < 1.0 and echo.get("steps", 0) > 0):
        raise SystemExit(f"train: echo needs a share between 0 and 1 and steps > 0, not {echo}")
    echo_b = (Batches(task.make_echoes(echo["examples"], recipe["data_seed"] + 3, tok,
                                       echo.get("tail_share", 0.0)), tok, seq_len, ans_len,
                      lm_len=lm_len)
              if echo else None)
    log(f"train: {len(train_b)} training and {len(held_b)} held-out examples encoded "
        f"in {time.time() - t_start:.1f} s")
    # answers are read from the first V_out logits
    for b in [train_b, held_b] + [x for x in (drill_b, echo_b) if x is not None]:
        top = int(np.take_along_axis(b.tokens, b.where + 1, axis=1)[b.mask > 0].max(initial=0))
        if top >= geo.V_out:
            raise SystemExit(f"train: answer token {top} is not below out_vocab {geo.V_out}")

    cq_roles = {r.name for r in R.core_roles(gen, hdr) if r.dtype == CQ}
    params = mod.init_params(hdr, recipe["init_seed"])
    steps, qat_steps = tr["steps"], tr.get("qat_steps", 0)
    total = steps + qat_steps
    sched = optax.warmup_cosine_decay_schedule(0.0, tr["lr"], tr["warmup"], total, tr["lr"] * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(sched, b2=0.98, weight_decay=tr["weight_decay"],
                                  mask=lambda ps: {k: (k in cq_roles) for k in ps}))
    frozen = set(getattr(mod, "FROZEN", ())) & set(params)
    if frozen:   # Needle 3's permutations: stored with the weights, never trained
        opt = optax.multi_transform({"train": opt, "frozen": optax.set_to_zero()},
                                    {k: ("frozen" if k in frozen else "train") for k in params})
    state = opt.init(params)
    averaged = dict(params) if ema else None

    def make_step(quantise: bool):
        def objective(p, *batch):
            q = QJ.fake_quant(p, cq_roles, tr["bits"]) if quantise else p
            return loss_fn(q, geo, *batch, lm_weight=lm_weight)

        @jax.jit
        def step(p, s, e, *batch):
            loss, g = jax.value_and_grad(objective)(p, *batch)
            upd, s = opt.update(g, s, p)
            p = optax.apply_updates(p, upd)
            if e is not None:
                e = jax.tree_util.tree_map(lambda a, b: a + (1.0 - ema) * (b - a), e, p)
            return p, s, e, loss

        @jax.jit
        def correct(p, *batch):
            q = QJ.fake_quant(p, cq_roles, tr["bits"]) if quantise else p
            return seq_correct(q, geo, *batch)
        return step, correct

    rng = np.random.default_rng(recipe["data_seed"])
    B = tr["batch"]
    buckets, weights = train_b.bucket_weights(tr["buckets"])
    if drill_b is not None:
        drill_buckets, drill_weights = drill_b.bucket_weights(drills.get("buckets", tr["buckets"]))
    if echo_b is not None:
        echo_buckets, echo_weights = echo_b.bucket_weights(echo.get("buckets", tr["buckets"]))
    history = []
    phases = [("float", steps, False)] + ([("qat", qat_steps, True)] if qat_steps else [])
    done = drill_steps = echo_steps = 0
    for name, n_steps, quantise in phases:
        step, correct = make_step(quantise)
        run_loss = []
        for i in range(n_steps):
            source, sets, w = train_b, buckets, weights
            if echo_b is not None and done < echo["steps"] and rng.random() < echo["share"]:
                source, sets, w = echo_b, echo_buckets, echo_weights
                echo_steps += 1
            elif drill_b is not None and rng.random() < drills["share"]:
                source, sets, w = drill_b, drill_buckets, drill_weights
                drill_steps += 1
            edge, pool = sets[rng.choice(len(sets), p=w)]
            idx = pool[rng.integers(0, len(pool), B)]
            params, state, averaged, loss = step(params, state, averaged,
                                                 *source.take(idx, geo, edge))
            run_loss.append(float(loss))
            done += 1
            if done % tr["log_every"] == 0 or i == n_steps - 1:
                acc = held_accuracy(correct, averaged if ema else params, held_b, geo, B)
                row = dict(step=done, phase=name, loss=float(np.mean(run_loss)), heldout_seq_acc=acc,
                           seconds=round(time.time() - t_start, 1))
                if ema:   # the un-averaged weights' figure beside the exported ones'
                    row["heldout_seq_acc_raw"] = held_accuracy(correct, params, held_b, geo, B)
                history.append(row)
                log(f"train: step {done:5d} {name:5s} loss {row['loss']:.4f}  held-out exact "
                    f"(teacher-forced greedy) {acc * 100:5.1f} %  {row['seconds']:7.1f} s")
                run_loss = []
    def archive_of(ps):
        return X.export(hdr, {k: np.asarray(v) for k, v in ps.items()}, tr["bits"], gen=gen)

    if ema and raw_out is not None:   # the un-averaged weights too, to compare
        raw_out.write_bytes(archive_of(params))
    blob = archive_of(averaged if ema else params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_bytes(blob)
    tmp.replace(out)
    report = dict(archive=str(out), bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest(),
                  seconds=round(time.time() - t_start, 1), drill_steps=drill_steps,
                  echo_steps=echo_steps, history=history,
                  jax=jax.__version__, optax=optax.__version__)
    log(f"train: wrote {out} ({len(blob)} bytes, sha256 {report['sha256'][:16]}…) "
        f"after {report['seconds']} s")
    return report


def held_accuracy(correct, params, held_b, geo, B) -> float:
    hits = 0
    n = len(held_b)
    for lo in range(0, n - n % B, B):
        hits += int(jnp.sum(correct(params, *held_b.take(np.arange(lo, lo + B), geo))))
    return hits / max(1, n - n % B)


def manifest(report: dict, recipe: dict, recipe_path: Path) -> dict:
    """The run's report with the recipe it followed (host_tests/test_demo_archive.py checks a
    bundled archive against it)."""
    out = dict(report)
    out["archive"] = Path(report["archive"]).name
    out["recipe_path"] = str(recipe_path)
    out["recipe"] = recipe
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.train", description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", required=True, type=Path)
    ap.add_argument("-o", "--out", required=True, type=Path)
    ap.add_argument("--report", type=Path, help="write the run's report (JSON) here: the manifest "
                    "committed beside a bundled archive (recipe, size, SHA-256, training curve)")
    ap.add_argument("--raw-out", type=Path, help="recipes with \"ema\": also write the "
                    "un-averaged weights' archive here")
    args = ap.parse_args(argv)
    try:
        recipe = json.loads(args.recipe.read_text())
    except (OSError, ValueError) as exc:
        print(f"train: cannot read recipe {args.recipe}: {exc}", file=sys.stderr)
        return 2
    if args.raw_out and not recipe.get("train", {}).get("ema"):
        print(f"train: --raw-out writes the un-averaged weights of a recipe with \"ema\"; "
              f"{args.recipe} has none: add \"ema\" to its \"train\" or drop --raw-out",
              file=sys.stderr)
        return 2
    report = run(recipe, args.out, log=lambda s: print(s, flush=True), raw_out=args.raw_out)
    if args.report:
        args.report.write_text(json.dumps(manifest(report, recipe, args.recipe), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
