"""The children of benchmarks/gpu/suite.py: one process per part, one JSON
line on stdout per measured variant, printed (flushed) the moment it is
measured, so the parent can show it at once and a part cut off by its limit
keeps its rows. `{"start": name}` comes before each variant and
`{"phase": "compiled", ...}` after its compile: a cut-off part then says
which variant it was in and how far it got.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import peers  # noqa: E402


def emit(**row) -> None:
    print(json.dumps(row), flush=True)


def child_kjax(spec: dict) -> None:
    """Each variant built, timed and emitted in turn. With `alternate` (rounds),
    the variants are then timed again taking turns, a round per line; the flash
    tiles each variant chose are emitted with its row (`tuning_budget_s` bounds
    their timing on the card)."""
    import jax
    from kjax.model import attention_core
    from kjax.model.flash import tuning as flash_tuning
    from kjax.pretrain.run_config import run_tiles
    if "tuning_budget_s" in spec:
        flash_tuning.BUDGET_S = spec["tuning_budget_s"]
    kept = {}
    for name, overrides in spec["variants"]:
        emit(start=name)
        extra = spec["extra"] + [f"--config.{o}" for o in overrides]
        config = harness.preset_config(spec["preset"], spec["seq"], spec["batch"],
                                       spec["dtype"], extra)

        def on_phase(phase, seconds, **info):
            if phase == "compile":   # so a variant cut off in its first step shows its compile
                emit(phase="compiled", s=round(seconds, 1), cache=info["cache"])
        tiles = run_tiles(config)   # chosen as kjax train chooses them, fixed in the config
        config.model.attention_tiles.update(tiles)
        step, times = harness.measure(config, spec["rounds"], spec["steps"], on_phase)
        emit(name=name, overrides=overrides, device=jax.devices()[0].device_kind,
             **step.figures(statistics.median(times)), **({"tiles": tiles} if tiles else {}))
        if spec.get("alternate"):
            kept[name] = step
    if len(kept) > 1:
        emit(flash_faster=attention_core.GPU_FLASH_FASTER)
        harness.alternate(kept, spec["alternate"], spec["steps"], on_round=lambda r, got: emit(
            round=r, ms={k: round(1000 * v[-1], 2) for k, v in got.items()}))


def child_torch(spec: dict) -> None:
    """transformers' ModernBertForMaskedLM at the kjax preset's dims."""
    import numpy as np
    import torch
    config = harness.preset_config(spec["preset"], spec["seq"], spec["batch"], "float32",
                                   spec["extra"])
    batch = harness.synthetic_batch(config, np.random.default_rng(0))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for compiled in spec["compile"]:
        import transformers
        name = f"torch {torch.__version__} {'torch.compile' if compiled else 'eager'}, " \
               f"sdpa, {'bf16 autocast, fused AdamW' if device == 'cuda' else 'fp32'}; " \
               f"transformers {transformers.__version__}"
        emit(start=name)
        side = peers.TorchModernBert(config, batch, device, compiled)
        times = [side.run(spec["steps"]) for _ in range(spec["rounds"])]
        step_s = statistics.median(times)
        memory = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
        emit(name=name, first_step_s=side.first_step_s, ms=round(1000 * step_s, 2),
             tokens_per_s=round(spec["batch"] * spec["seq"] / step_s), peak_gib=memory,
             versions=side.versions)


if __name__ == "__main__":
    {"kjax": child_kjax, "torch": child_torch}[sys.argv[1]](json.loads(sys.argv[2]))
