"""Training-side helpers: the synthetic tool-calling task a tiny Needle model is trained and
evaluated on (``train.task``; train/README.md)."""
