"""needle-fw generator: from a `.cact` archive to a specialised C engine.

The stages, each a sub-package, import only the stages above them in this list:

    archive/   the .cact format: constants, tensor roles, the CQ quantiser, the validating
               reader, the writer, the tokenizer blob (parse, encode, decode, pack)
    model/     what a header means: geometry facts (windows, layer kinds, KV layout,
               session RAM, work per token) and the NumPy reference of both generations
    codegen/   plan (typed data the templates render), families (one descriptor per kernel
               family), render (Jinja2), pipeline (writes gen/)
    tools/     tool calling: the prompt, schemas into call-grammar tables, the byte matcher,
               constrained decoding and the envelope, typed C bindings, retrieval (the
               Python twins of firmware's tool-calling C)
    build/     boards (target files), compiler flags, ELF checks, images, packages, the SDK,
               the board runner, the SCons tool
    commands/  what users run: the CLI (cli, the one front end) over inspect, synth, rung,
               golden and evaluate

errors, paths and files are shared by every stage.  `python -m generator --help` lists the
commands.  Benchmark drivers live in bench/, the tokenizer-corpus builders in
tools/tokenizer/, all C text in templates/; they import generator, never the other way
(host_tests/test_layers.py; docs/architecture.md, "Layout").
"""

# The one place the version is set: pyproject.toml reads it (the wheel, `pip show needle-fw`), and
# `needle-fw --version`, the generated files, the SDK and the OpenWrt package print it.
__version__ = "0.2.0"
