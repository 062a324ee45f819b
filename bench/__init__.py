"""Benchmark drivers: host.py (engine vs NumPy reference, fast vs scalar kernels) and mcu.py
(Cortex-M instructions per token under QEMU -icount).  `scons bench=1` runs them."""
