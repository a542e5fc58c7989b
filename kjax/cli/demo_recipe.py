"""`kjax demo --recipe`: tpu_configs/modern_2026.py's three phases at demo
size on CPU — two embedded corpora as separate sources of a mixture whose
weights and temperature anneal, masking 30 % → 15 % → 5 %, a batch ramp, EMA,
the 1 − √ decay as a decay branch of the extension."""
from __future__ import annotations

import json
import os

# The sources: the two prose corpora that ship with the package, each
# prepared into data.dir/NAME (kjax/text/corpus.py).
SOURCES = {"konlpy": "konlpy", "chatterbot": "chatterbot-ko"}
WEIGHTS = ({"konlpy": 0.7, "chatterbot": 0.3}, {"konlpy": 0.5, "chatterbot": 0.5},
           {"konlpy": 0.3, "chatterbot": 0.7})
MASK_RATES, TEMPERATURES = (0.3, 0.15, 0.05), (0.7, 0.5, 0.3)
# stable: 40 steps (the first 10 at batch 8, then 16); extension: 20 steps
# with RoPE θ 160k (rows stay 128: a longer context would need a second
# prepare); decay: steps 21–30 of the extension's run, rate to 0 by 1 − √.
STEPS = {"stable": 40, "extend": 20, "decay": 30}
DATA = "runs/demo_data_recipe"


def _sources(i: int) -> dict:
    return {n: {"corpus": c, "weight": WEIGHTS[i][n]} for n, c in SOURCES.items()}


def recipe_keys() -> dict:
    """The recipe's keys on top of the modern demo's (kjax/cli/demo.py)."""
    per_phase = lambda i: {"data.sources": _sources(i),   # noqa: E731
                           "data.masked_lm_prob": MASK_RATES[i],
                           "data.source_temperature": TEMPERATURES[i]}
    phases = (
        {"name": "stable", "overrides": {
            **per_phase(0), "train.num_steps": STEPS["stable"], "model.rope_theta": 10_000.0,
            "train.schedule": "constant", "train.batch_ramp": ((10, 8),),
            "train.batch_ramp_unit": "steps"}},
        {"name": "extend", "overrides": {
            **per_phase(1), "train.num_steps": STEPS["extend"], "model.rope_theta": 160_000.0,
            "train.schedule": "constant", "init.optimizer": "keep", "train.warmup_steps": 0}},
        {"name": "decay", "overrides": {
            **per_phase(2), "train.num_steps": STEPS["decay"], "model.rope_theta": 160_000.0,
            "init.mode": "continue", "init.optimizer": "keep", "train.warmup_steps": 0,
            "train.decay_steps": STEPS["decay"] - STEPS["extend"]}})
    return {"data.sources": _sources(0), "data.masked_lm_prob": 0.3,
            "data.source_temperature": 0.7, "data.corpus": "",
            "tokenizer.corpus": ",".join(SOURCES.values()), "tokenizer.vocab_size": 1000,
            "model.vocab_size": 1000, "tokenizer.model_type": "unigram",
            "tokenizer.path": f"{DATA}/tokenizer/sp", "data.dir": f"{DATA}/examples",
            "train.batch_size": 16, "train.optimizer": "stable_adamw", "train.schedule": "wsd",
            "train.decay_shape": "sqrt", "train.ema_decay": 0.99, "train.warmup_steps": 5,
            "train.log_every": 5, "train.eval_every": 10, "train.checkpoint_every": 10,
            "phases": phases}


def show_recipe(workdir: str) -> None:
    """Each phase's last logged step: the realised mask share against the rate
    asked for, each source's examples so far, and the decay branch's parent."""
    from kjax.train.logdir import read_run_metrics
    for phase in ("stable", "extend", "decay"):
        sub = os.path.join(workdir, "phases", phase)
        rows = [r for r in read_run_metrics(sub) if r["split"] == "train"]
        if not rows:
            continue
        r = rows[-1]
        counts = ", ".join(f"{n} {r[f'source/{n}/examples']:.0f}" for n in SOURCES
                           if f"source/{n}/examples" in r)
        print(f"  {phase:7s} step {r['step']:3d}: masked {r.get('masked_share', 0):.1%} "
              f"(rate {r.get('mask_rate', 0):.0%}); examples by source: {counts}")
    lineage = os.path.join(workdir, "phases", "decay", "lineage.json")
    if os.path.exists(lineage):
        with open(lineage) as f:
            print(f"  decay branch of {json.load(f).get('parent')}")
