"""The tool-calling prompt of docs/spec/prompt-and-tokenizer.md section 4.1.

``render_prompt(tools_json_text, query, system=None)`` returns::

    [<|im_start|>system\\n{system.strip()}<|im_end|>\\n]      (only if system.strip() != "")
    <|im_start|>user\\n<tools>{TOOLS_JSON}</tools>\\n{query}<|im_end|>\\n<|im_start|>assistant\\n

TOOLS_JSON is the tool list written as ``json.dumps(json.loads(text), separators=(",", ":"),
ensure_ascii=False)`` would write it, except that numbers are copied exactly as written in
the input (the C renderer cannot reproduce Python's float repr cheaply; integers come out
the same either way).  The input must be strict RFC 8259 JSON whose top level is an array
of objects; duplicate keys in an object are rejected.  Every rule, and the few places
where this deliberately differs from ``json.loads``/``json.dumps``, is in docs/prompt.md.

``render_prompt_segments`` gives the same prompt split into template text and the caller's
text, and ``render_prompt_ids`` its token ids, optionally with chat markers in the caller's
text encoded as plain text (``--plain-markers``; docs/prompt.md).

This module is the twin of the hand-written ``firmware/lib/needle_tool_prompt.c``: the same
input gives the same bytes, and the same error message ("tools JSON: line L, column C:
..." with the column counted in characters).
"""

from __future__ import annotations

from generator.errors import CactError

MAX_DEPTH = 64

_WS = " \t\n\r"
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t"}
_OUT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
                "\f": "\\f"}


def _escape_char(ch: str) -> str:
    """One character as json.dumps(ensure_ascii=False) writes it inside a string; a lone
    surrogate becomes \\udxxx (json.dumps would keep it raw, which is not valid UTF-8)."""
    esc = _OUT_ESCAPES.get(ch)
    if esc is not None:
        return esc
    cp = ord(ch)
    if cp < 0x20 or 0xD800 <= cp <= 0xDFFF:
        return f"\\u{cp:04x}"
    return ch


class _Fail(Exception):
    def __init__(self, pos: int, message: str):
        super().__init__(message)
        self.pos = pos
        self.message = message


# Our extension on a tool object (docs/grammar.md §5a): the tool's own minimum confidence.
# Keys of a tool object that begin with EXT_PREFIX are ours: never rendered into the prompt
# (the model sees the list as the official engine renders it without them), and an unknown
# one is refused (a typo would otherwise be silently ignored).
EXT_PREFIX = "x-needle-"
EXT_MIN_CONFIDENCE = "x-needle-min-confidence"


def parse_ppm(text: str) -> int | None:
    """A decimal in [0, 1] with at most 6 digits after the point ("0.5", "1", ".25"), in parts
    per million; None for anything else.  Twin of needle_parse_confidence."""
    import re
    m = re.fullmatch(r"(0|1)(?:\.([0-9]{1,6}))?|\.([0-9]{1,6})", text)
    if not m:
        return None
    frac = m.group(2) or m.group(3) or ""
    ppm = int(m.group(1) or 0) * 10 ** 6 + int(frac.ljust(6, "0") or 0)
    return ppm if ppm <= 10 ** 6 else None


class _Minifier:
    def __init__(self, text: str):
        self.s = text
        self.n = len(text)
        self.pos = 0
        self.out: list[str] = []
        self.thresholds: dict[int, int] = {}   # tool index -> its x-needle-min-confidence (ppm)

    def fail(self, pos: int, message: str):
        raise _Fail(pos, message)

    def skip_ws(self):
        s, n, p = self.s, self.n, self.pos
        while p < n and s[p] in _WS:
            p += 1
        self.pos = p

    def hex4(self, at: int):
        chunk = self.s[at:at + 4]
        if len(chunk) == 4 and all(c in _HEX for c in chunk):
            return int(chunk, 16)
        return None

    def string(self) -> str:
        """The string at the '"' at self.pos; returns its decoded value, writes it minified."""
        s, n = self.s, self.n
        opening = self.pos
        self.pos += 1
        chars = []
        while True:
            if self.pos >= n:
                self.fail(opening, "unterminated string")
            c = s[self.pos]
            if c == '"':
                self.pos += 1
                break
            cp = ord(c)
            if cp < 0x20:
                self.fail(self.pos, f"unescaped control character U+{cp:04X} in string")
            if 0xD800 <= cp <= 0xDFFF:  # a raw lone surrogate: not encodable as UTF-8
                self.fail(self.pos, "invalid UTF-8")
            if c == "\\":
                if self.pos + 1 >= n:
                    self.fail(opening, "unterminated string")
                e = s[self.pos + 1]
                if e in _SIMPLE_ESCAPES:
                    chars.append(_SIMPLE_ESCAPES[e])
                    self.pos += 2
                    continue
                if e != "u":
                    self.fail(self.pos, "invalid escape")
                value = self.hex4(self.pos + 2)
                if value is None:
                    self.fail(self.pos, "invalid \\u escape")
                step = 6
                if 0xD800 <= value <= 0xDBFF and s[self.pos + 6:self.pos + 8] == "\\u":
                    low = self.hex4(self.pos + 8)
                    if low is not None and 0xDC00 <= low <= 0xDFFF:
                        value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                        step = 12
                chars.append(chr(value))
                self.pos += step
                continue
            chars.append(c)
            self.pos += 1
        value = "".join(chars)
        self.out.append('"' + "".join(_escape_char(ch) for ch in value) + '"')
        return value

    def literal(self, word: str):
        if not self.s.startswith(word, self.pos):
            self.fail(self.pos, "invalid literal")
        self.out.append(word)
        self.pos += len(word)

    def number(self):
        s, n = self.s, self.n
        start = p = self.pos

        def digit(at):
            return at < n and s[at] in _DIGITS

        def digits(at):         # one or more digits of a fraction or an exponent
            if at >= n:
                self.fail(at, "unexpected end of input")
            if not digit(at):
                self.fail(at, "invalid number")
            while digit(at):
                at += 1
            return at

        if s[p] == "-":
            p += 1
        if p >= n:
            self.fail(p, "unexpected end of input")
        if s[p] == "0":
            p += 1
        elif digit(p):
            while digit(p):
                p += 1
        else:
            self.fail(p, "invalid number")
        if p < n and s[p] == ".":
            p = digits(p + 1)
        if p < n and s[p] in "eE":
            p += 1
            if p < n and s[p] in "+-":
                p += 1
            p = digits(p)
        self.out.append(s[start:p])
        self.pos = p

    def run(self) -> str:
        """Validate and minify; same state machine as pr_json_minify in tool_prompt.c."""
        s, n = self.s, self.n
        kinds: list[str] = []     # "[" or "{"
        keys: list[set] = []      # keys seen, per open object
        tools = 0
        state = "value"
        ext = None                # an extension key's value being read: (output mark, value position)
        drop_comma = False        # the extension key was its object's first: drop the comma after it
        while True:
            self.skip_ws()
            if state == "after" and not kinds:
                if self.pos < n:
                    self.fail(self.pos, "extra data after the JSON value")
                return "".join(self.out)
            if self.pos >= n:
                self.fail(self.pos, "unexpected end of input")
            c = s[self.pos]

            if state == "after":
                obj = kinds[-1] == "{"
                if ext is not None and len(kinds) == 2:      # the extension's value is read: unwrite it
                    del_from, value_from, at = ext
                    ppm = parse_ppm("".join(self.out[value_from:]))
                    if ppm is None:
                        self.fail(at, f'"{EXT_MIN_CONFIDENCE}" must be a number from 0 to 1 with at most '
                                      f'6 decimals (e.g. 0.9)')
                    self.thresholds[tools - 1] = ppm
                    del self.out[del_from:]
                    ext = None
                if c == ",":
                    if drop_comma and len(kinds) == 2:
                        drop_comma = False
                    else:
                        self.out.append(",")
                    self.pos += 1
                    state = "key" if obj else "value"
                elif c == ("}" if obj else "]"):
                    self.out.append(c)
                    self.pos += 1
                    if len(kinds) == 2:
                        drop_comma = False
                    kinds.pop()
                    if obj:
                        keys.pop()
                else:
                    self.fail(self.pos, "expected ',' or '}'" if obj else "expected ',' or ']'")
                continue

            if state in ("key", "first_key"):
                at = self.pos
                if c != '"':
                    self.fail(self.pos, "expected a string key or '}'" if state == "first_key"
                              else "expected a string key")
                mark = len(self.out)
                key = self.string()
                if key in keys[-1]:
                    self.fail(at, "duplicate key in object")
                keys[-1].add(key)
                if len(kinds) == 2 and key.startswith(EXT_PREFIX):   # a tool object's extension key
                    if key != EXT_MIN_CONFIDENCE:
                        self.fail(at, f'unknown extension key on a tool (the one there is: "{EXT_MIN_CONFIDENCE}")')
                    first = self.out[mark - 1] != ","
                    drop_comma = drop_comma or first   # the first key: the comma after its value goes
                    ext = [mark if first else mark - 1, mark + 2, None]   # unwrite from; value from; at
                self.skip_ws()
                if self.pos >= n:
                    self.fail(self.pos, "unexpected end of input")
                if s[self.pos] != ":":
                    self.fail(self.pos, "expected ':'")
                self.out.append(":")
                self.pos += 1
                state = "value"
                if ext is not None and ext[2] is None:
                    self.skip_ws()
                    ext[2] = self.pos
                continue

            # state == "value"
            depth = len(kinds)
            if c not in '{["tfn-' and c not in _DIGITS:
                self.fail(self.pos, "expected a value")
            if depth == 0 and c != "[":
                self.fail(self.pos, "the top-level value must be an array of tool objects")
            if depth == 1:
                tools += 1
                if c != "{":
                    self.fail(self.pos, f"tool #{tools} is not a JSON object")
            if c in "[{":
                if depth == MAX_DEPTH:
                    self.fail(self.pos, f"nesting deeper than {MAX_DEPTH} levels")
                kinds.append(c)
                if c == "{":
                    keys.append(set())
                self.out.append(c)
                self.pos += 1
                self.skip_ws()
                close = "}" if c == "{" else "]"
                if self.pos < n and s[self.pos] == close:
                    self.out.append(close)
                    self.pos += 1
                    kinds.pop()
                    if c == "{":
                        keys.pop()
                    state = "after"
                else:
                    state = "first_key" if c == "{" else "value"
                continue
            if c == '"':
                self.string()
            elif c == "t":
                self.literal("true")
            elif c == "f":
                self.literal("false")
            elif c == "n":
                self.literal("null")
            else:
                self.number()
            state = "after"


def minify_tools(text: str) -> str:
    """TOOLS_JSON of the tool-list text (validated; CactError with line:column if not)."""
    return minify_tools_ext(text)[0]


def minify_tools_ext(text: str) -> tuple[str, dict]:
    """TOOLS_JSON (our extension keys left out) and each tool's own minimum confidence in
    parts per million, {tool index: ppm} (twin of pr_json_minify's thresholds)."""
    if not isinstance(text, str):
        raise CactError(f"tools JSON must be a str, not {type(text).__name__}")
    m = _Minifier(text)
    try:
        return m.run(), m.thresholds
    except _Fail as exc:
        line = text.count("\n", 0, exc.pos) + 1
        column = exc.pos - text.rfind("\n", 0, exc.pos)
        raise CactError(f"line {line}, column {column}: {exc.message}", where="tools JSON") from None


def _check_text(name: str, value: str) -> None:
    if not isinstance(value, str):
        raise CactError(f"{name} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CactError(f"{name} is not valid UTF-8 (lone surrogate at index {exc.start})") from None
    if "\0" in value:
        # The C renderer takes NUL-terminated strings; keep the two identical.
        raise CactError(f"{name} contains a NUL character")


def system_facts(system: str | None, date: str | None) -> str | None:
    """The system text with the system facts' date (docs/prompt.md, "System facts"; the
    Needle 3 wrapper's behaviour as an option): ``date`` None leaves ``system`` as it is; a
    stripped system text that already holds a date fact (it starts with ``date:`` or has
    ``; date:``) is kept; otherwise ``date: DATE``, then ``; `` and the stripped system text.
    Twin of firmware/lib/needle_tool_prompt.c needle_system_facts."""
    if date is None:
        return system
    text = (system or "").strip()
    if text.startswith("date:") or "; date:" in text:
        return system
    return f"date: {date}" + (f"; {text}" if text else "")


def render_prompt_segments(tools_json_text: str, query: str,
                           system: str | None = None) -> list:
    """The section 4.1 prompt as ``(text, trusted)`` pieces whose concatenation is
    :func:`render_prompt`'s result: ``trusted`` is True for the template's own text (its
    chat markers included) and False for the caller's text: the stripped system, the
    TOOLS_JSON and the query (twin of ``needle_render_prompt_ex``'s untrusted spans)."""
    _check_text("query", query)
    parts = []
    if system is not None:
        _check_text("system", system)
        stripped = system.strip()
        if stripped:
            parts += [("<|im_start|>system\n", True), (stripped, False), ("<|im_end|>\n", True)]
    tools = minify_tools(tools_json_text)
    parts += [("<|im_start|>user\n<tools>", True), (tools, False), ("</tools>\n", True),
              (query, False), ("<|im_end|>\n<|im_start|>assistant\n", True)]
    return parts


def render_prompt(tools_json_text: str, query: str, system: str | None = None) -> str:
    """The section 4.1 prompt for a tool list (JSON text), a query and an optional system."""
    return "".join(text for text, _ in render_prompt_segments(tools_json_text, query, system))


def render_prompt_ids(tokenizer, tools_json_text: str, query: str, system: str | None = None,
                      *, plain_markers: bool = False) -> list:
    """``[BOS] + ids`` of the prompt, as the CLI feeds it (``needle --tools F --query Q``).

    ``plain_markers=False`` (the default, the packages' behaviour): ``tokenizer.encode`` of
    the whole prompt, so a chat marker written in the query, the system or the tool list
    becomes a marker token.  ``plain_markers=True`` (``needle --plain-markers``): the
    caller's text is encoded with markers off (docs/prompt.md, "Chat markers in untrusted
    text"); only the template's own markers are marker tokens.
    """
    if plain_markers is not True and plain_markers is not False:
        raise CactError(f"plain_markers must be True or False, not {plain_markers!r}")
    segments = render_prompt_segments(tools_json_text, query, system)
    if plain_markers:
        ids = tokenizer.encode_segments(segments)
    else:
        ids = tokenizer.encode("".join(text for text, _ in segments))
    return [tokenizer.bos_id] + ids
