"""``twinbench explain``: where a run's step time goes, and why one run is slower than another.

Reads Records and trace files and knows no model: :mod:`.timing` (phases by timing, run in the worker after
the measured steps), :mod:`.torch_trace` and :mod:`.jax_trace` (+ :mod:`.hlo`) read the profilers' traces,
:mod:`.taxonomy` is the one op taxonomy of both frameworks, :mod:`.gap` the per-run checks and the gap table,
:mod:`.runs` and :mod:`.command` the command line's orchestration.
"""
