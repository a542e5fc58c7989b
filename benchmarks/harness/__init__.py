"""What every benchmark shares (benchmarks/README.md): presets at a chosen
size and synthetic batches (presets), building, compiling and timing a step
and taking turns between sides (step), the peers (peers), child processes
(proc) and the records the results become (records).

The scripts run as `python benchmarks/<folder>/<name>.py`; each puts
benchmarks/ on sys.path first (`sys.path.insert(0, ...)`) and imports this.
"""
from harness.presets import ROOT, SHAPES, TINY_MODEL, overrides_of, preset_config  # noqa: F401
from harness.presets import synthetic_batch  # noqa: F401
from harness.proc import load_average, load_text  # noqa: F401
from harness.step import Step, alternate, compare, lower_step, measure, peak_bytes  # noqa: F401
