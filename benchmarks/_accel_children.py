"""The children of benchmarks/accelerator.py: one process per part, one
JSON line on stdout per measured variant, printed (flushed) the moment it is
measured, so the parent can show it at once and a part cut off by its limit
keeps its rows. `{"start": name}` comes before each variant: a cut-off part
then says which variant it was in.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import _common


def measure(config, rounds: int, steps: int) -> dict:
    import jax
    import numpy as np
    from kjax.parallel.mesh import make_mesh, on_mesh, put_batch
    from kjax.train.metrics import peak_flops
    from kjax.train.state import init_state, make_model, make_optimizer
    from kjax.train.step import flops_per_example, make_train_step
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    batch = put_batch(_common.synthetic_batch(config, np.random.default_rng(0)), mesh)
    before = _common.cache_files()
    start = time.perf_counter()
    with on_mesh(mesh, config):
        compiled = step.jitted.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    # the run's persistent cache (benchmarks/accelerator.py): a program an
    # earlier part compiled is read back, and its compile time says so
    cache = "" if not _common.cache_files() and not before else \
        ("hit" if _common.cache_files() == before else "miss")
    # progress, so a variant cut off in its first step still shows its compile time
    print(json.dumps({"phase": "compiled", "s": round(compile_s, 1), "cache": cache}), flush=True)
    state, first_s = _common.timed_steps(compiled, state, batch, 1)
    times = []
    for _ in range(rounds):
        state, seconds = _common.timed_steps(compiled, state, batch, steps)
        times.append(seconds)
    step_s = statistics.median(times)
    d, b = config.data, config.train.batch_size
    flops = flops_per_example(config.model, d.max_seq_len, d.max_predictions_per_seq) * b
    peak, source = peak_flops(config)
    return {"compile_s": compile_s, "first_step_s": first_s, "step_ms": 1000 * step_s,
            "tokens_s": b * d.max_seq_len / step_s, "mfu": flops / step_s / peak,
            "peak_gib": _common.peak_bytes(compiled) / 2**30, "peak_source": source, "cache": cache,
            "device": jax.devices()[0].device_kind}


def child_kjax(spec: dict) -> None:
    for name, overrides in spec["variants"]:
        print(json.dumps({"start": name}), flush=True)
        extra = spec["extra"] + [f"--config.{o}" for o in overrides]
        config = _common.preset_config(spec["preset"], spec["seq"], spec["batch"],
                                       spec["dtype"], extra)
        result = measure(config, spec["rounds"], spec["steps"])
        print(json.dumps({"name": name, "overrides": overrides, **result}), flush=True)


def child_torch(spec: dict) -> None:
    """transformers' ModernBertForMaskedLM at the kjax preset's dims (modern.py)."""
    import numpy as np
    import torch
    import transformers
    from modern import torch_step

    from kjax.model.config import EncoderConfig
    config = _common.preset_config(spec["preset"], spec["seq"], spec["batch"], "float32",
                                   spec["extra"])
    batch = _common.synthetic_batch(config, np.random.default_rng(0))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for compiled in spec["compile"]:
        name = f"torch {torch.__version__} {'torch.compile' if compiled else 'eager'}, " \
               f"sdpa, {'bf16 autocast, fused AdamW' if device == 'cuda' else 'fp32'}; " \
               f"transformers {transformers.__version__}"
        print(json.dumps({"start": name}), flush=True)
        start = time.perf_counter()
        step, _ = torch_step(EncoderConfig.from_config(config.model), batch,
                             config.train.learning_rate, device, device == "cuda", compiled)
        step()
        first_s = time.perf_counter() - start
        times = []
        for _ in range(spec["rounds"]):
            start = time.perf_counter()
            for _ in range(spec["steps"]):
                step()     # float(loss) in step() waits for the device
            times.append((time.perf_counter() - start) / spec["steps"])
        step_s = statistics.median(times)
        memory = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        print(json.dumps({"name": name, "first_step_s": first_s, "step_ms": 1000 * step_s,
                          "tokens_s": spec["batch"] * spec["seq"] / step_s,
                          "peak_gib": memory}), flush=True)


if __name__ == "__main__":
    {"kjax": child_kjax, "torch": child_torch}[sys.argv[1]](json.loads(sys.argv[2]))
