"""Tool retrieval with the embedding head (docs/grammar.md, "Retrieval"); Python twin of
firmware/lib/needle_retrieval.c, bit for bit.

With more than ``TOP`` tools the official engine renders only the five best for the query:
every tool and the query are embedded by the probe head of code 1 (Needle 2 "contrastive",
Needle 3 "embedding": a unit vector) and scored by their dot product.

[FLAG] renderings (the spec does not say): a tool is embedded as BOS and its minified JSON
object, a query as BOS and its text, both encoded with chat markers as plain text.  The five
best are rendered in the list's order; on a tie in score the earlier tool wins.
"""

from __future__ import annotations

import numpy as np

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.errors import CactError
from generator.model import numerics as nm
from generator.model import reference
from generator.tools.prompt import EXT_MIN_CONFIDENCE, minify_tools, minify_tools_ext

TOP = 5            # tools rendered when there are more (NEEDLE_RETRIEVE_TOP)
MAX_TOOLS = 32     # tools a list may hold (NEEDLE_RETRIEVE_TOOLS, the grammar's bound)
F32 = np.float32


def split_elements(minified: str) -> list[str]:
    """The top-level elements of a minified JSON array, as text."""
    out, depth, in_string, start, i = [], 0, False, 0, 0
    while i < len(minified):
        c = minified[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            if depth == 1:
                start = i
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 1:
                out.append(minified[start:i + 1])
        i += 1
    return out


def _ids(tok, text: str, head_tokens: int) -> list:
    ids = [tok.bos_id] + tok.encode_segments([(text, False)])
    if len(ids) > head_tokens:
        raise CactError(f"{len(ids)} tokens is longer than the embedding head's {head_tokens} tokens "
                        "(rebuild with a larger head_tokens=N)")
    return ids


def embed(model, tok, text: str, head_tokens: int) -> np.ndarray:
    """The code-1 head's unit vector of BOS + text (markers plain), as the engine computes it."""
    ids = _ids(tok, text, head_tokens)
    name = next(hd.name for hd in model.a.heads if hd.code == 1)
    return np.asarray(model.heads(ids)[name], dtype=F32)


def retrieve(model, tok, tools_text: str, query: str, head_tokens: int,
             tools_embedded: list | None = None) -> tuple[str, list | None, int]:
    """(the tools JSON to render, the chosen indices, the tokens embedding took) for a
    constrained turn: the list itself, None and 0 with at most TOP tools or without the
    embedding head in the engine (head_tokens 0, or no code-1 head); else the TOP best as a
    minified array, each chosen tool keeping its own "x-needle-min-confidence" (the call is
    judged by it as if the caller had listed only those five).  More than MAX_TOOLS tools are
    refused, never narrowed.  tools_embedded: the tools' vectors computed at build time (a
    built-in list, tool_embeddings): only the query is embedded."""
    minified, thresholds = minify_tools_ext(tools_text)
    elements = split_elements(minified)
    if len(elements) <= TOP or not head_tokens or not any(hd.code == 1 for hd in model.a.heads):
        return tools_text, None, 0
    if len(elements) > MAX_TOOLS:
        raise CactError(f"{len(elements)} tools; a tool list holds at most {MAX_TOOLS} (NEEDLE_RETRIEVE_TOOLS): "
                        "split it", where="tools JSON")
    q = embed(model, tok, query, head_tokens)
    tokens = len(_ids(tok, query, head_tokens))
    if tools_embedded is None:
        tools_embedded = [embed(model, tok, e, head_tokens) for e in elements]
        tokens += sum(len(_ids(tok, e, head_tokens)) for e in elements)
    scores = [F32(nm.seq_dot(v, q)) for v in tools_embedded]
    chosen = sorted(sorted(range(len(elements)), key=lambda i: (-scores[i], i))[:TOP])
    return "[" + ",".join(_with_threshold(elements[i], thresholds.get(i)) for i in chosen) + "]", chosen, tokens


def _with_threshold(element: str, ppm: int | None) -> str:
    """A minified tool object with its own threshold written back (six decimals, exactly the ppm)."""
    if ppm is None:
        return element
    return f'{element[:-1]},"{EXT_MIN_CONFIDENCE}":{ppm // 10 ** 6}.{ppm % 10 ** 6:06d}}}'


def tool_embeddings(archive_path: str, tools_text: str, head_tokens: int) -> list | None:
    """Every tool's embedding, computed once at build time for a built-in list (scons
    tools=FILE head_tokens=N): the a8 reference's code-1 head, bit-identical to what the
    engine computes on the device, so a turn embeds only the query.  None where the engine
    does not retrieve: at most TOP tools, head_tokens 0, or an archive without the head."""
    elements = split_elements(minify_tools(tools_text))
    if len(elements) <= TOP or not head_tokens:
        return None
    with open(archive_path, "rb") as fh:
        a = reader.read(fh.read())
    if not any(hd.code == 1 for hd in a.heads):
        return None
    model = reference(a, "a8")
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    out = []
    for i, e in enumerate(elements):
        try:
            out.append(embed(model, tok, e, head_tokens))
        except CactError as exc:
            raise CactError(f"tool {i + 1}: {exc}") from None
    return out

