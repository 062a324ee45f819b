"""libFuzzer harnesses, the soak driver and the archive mutation fuzzer (README.md here)."""
