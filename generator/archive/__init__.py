"""The .cact archive format (docs/spec/cact-format.md): constants, roles, quantiser, reader,
writer and the tokenizer blob.  Imports nothing else from the generator but errors."""
