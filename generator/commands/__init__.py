"""User-facing commands: inspect, synth, rung, golden, prompt rendering and the CLI."""
