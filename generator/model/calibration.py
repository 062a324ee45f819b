"""The recommended minimum call confidence per model generation (docs/calibration.md).

A call whose envelope confidence is below the threshold is reported but withheld: the
envelope says ``"success": false`` with error_code 3, and ``needle_run()`` dispatches nothing.
The figures are measured on the bundled demo models (``python -m bench.calibrate``); the
generated engine gets its generation's value as ``NEEDLE_MIN_CONFIDENCE_PPM`` (the CLI's and
the service's default ``--min-confidence``), the Python twin reads it here.  Parts per
million: both twins compare ``confidence * 1e6 < ppm`` in double precision.
"""

from __future__ import annotations

MIN_CONFIDENCE_PPM = {2: 400000, 3: 500000}   # docs/calibration.md, "Recommended defaults"


def min_confidence_ppm(generation: int) -> int:
    return MIN_CONFIDENCE_PPM[generation]
