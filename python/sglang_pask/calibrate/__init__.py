"""Offline calibration (DESIGN.md §5, ``pask calibrate``): measured task-error sensitivity
S[g][c] (:mod:`.sensitivity`, via the probe methods of :mod:`.probes`) and attention-output
distortion D[g](b) (:mod:`.distortion`) compile into a small policy family (:mod:`.family`),
searched per budget on calibration entries against SnapKV (:mod:`.search`); :mod:`.pipeline`
runs it all and writes the policies and the report (:mod:`.report`). Calibration data only: the
eval split is never used here.
"""
