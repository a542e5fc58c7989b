r"""The 2026 encoder recipe for Korean (ModernBERT, Warner et al. 2024; mmBERT,
Marone et al. 2025; Ettin, Weller et al. 2025), on modern_base's
architecture (kjax/model/modern.py: 22 layers, 768 hidden, RoPE, local/global
attention, StableAdamW, WSD with the 1 − √ decay). Three phases of one run
(docs/PRETRAINING.md, "Runs in phases" and "The 2026 recipe"):

- `stable1024`: 150k steps at 1024 positions, masking 30 %, a source mixture
  (web 0.6, news 0.25, wiki 0.15)
  sampled at temperature 0.7 (∝ weight · examples^0.7), a batch ramp
  64 → 128 → 256 rows over the first 4B tokens, the rate held at the peak;
- `extend8192`: 25k steps of 32 × 8192 (2 microbatches), masking 15 %, temperature 0.5, the
  curated sources weighted up, the optimizer's moments kept;
- `decay8192`: a decay branch of `extend8192` (init.mode=continue), 5k steps
  to rate 0 by 1 − √progress, masking 5 %, temperature 0.3, web text down
  (0.3/0.35/0.35).

The parameters' moving average (train.ema_decay 0.9999) is kept throughout;
`kjax average` of the decay's last checkpoints is the other way to smooth.

    one="--config.data.sources={} --config.data.source_temperature=0"   # one source at a time
    kjax tokenizer train --config tpu_configs/modern_2026.py $one --config.data.corpus='gs://B/corpus/*/*'
    for s in web news wiki; do for n in 1024 8192; do d=runs/modern_2026_data/$s
      [ $n = 8192 ] && d=${d}_8192
      kjax prepare --config tpu_configs/modern_2026.py $one --config.data.corpus="gs://B/corpus/$s/*" --config.data.max_seq_len=$n --config.data.dir=$d
    done; done
    kjax train   --config tpu_configs/modern_2026.py --workdir gs://B/runs/modern_2026
    kjax average --workdir gs://B/runs/modern_2026/phases/decay8192 --last 4
    kjax export  --config tpu_configs/modern_2026.py --workdir gs://B/runs/modern_2026/phases/decay8192 --out hf/

Expected: nothing of this preset has been trained at scale; what was run is
its configuration (each phase validates, tests/test_recipe_2026.py; each
phase and batch-ramp stage compiles for a v3-8, `make tpu-check`) and the
demo-size recipe, `kjax demo --recipe`: 62 s on a shared 2-core CPU, each
phase's realised mask share 30.3 / 15.2 / 4.7 %. From the
papers: the annealed mask rate and source temperature help low-resource
languages in the decay (mmBERT), and the decay phase gives most of the final
quality (ModernBERT, Ettin); ~135 M parameters with a 32k vocabulary.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 11.89 GiB per core of 16 (arguments
0.29, temporaries 11.61): fits.
`kjax compile --config tpu_configs/modern_2026.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import modern_config

# The mixture's weights by phase: web text dominant while stable, the curated
# sources (news, encyclopedia) weighted up for the extension and decay, as
# mmBERT and Ettin anneal on cleaner text.
WEIGHTS = {"stable": {"web": 0.6, "news": 0.25, "wiki": 0.15},
           "extend": {"web": 0.45, "news": 0.3, "wiki": 0.25},
           "decay": {"web": 0.3, "news": 0.35, "wiki": 0.35}}


def _sources(max_seq_len: int, phase: str) -> dict:
    suffix = "" if max_seq_len == 1024 else f"_{max_seq_len}"
    return {s: {"dir": f"runs/modern_2026_data/{s}{suffix}", "weight": w}
            for s, w in WEIGHTS[phase].items()}


def get_config():
    c = modern_config("modern_2026", "base", max_seq_len=1024)
    c.model.remat_policy = "dots_with_no_batch_dims_saveable"
    # ModernBERT's weight decay (1e-5) is not scaled by the rate and kjax's is: divide by the peak.
    c.train.update(optimizer="stable_adamw", b1=0.9, b2=0.98, eps=1e-6,
                   weight_decay=1e-5 / c.train.learning_rate, schedule="wsd",
                   decay_shape="sqrt", ema_decay=0.9999)
    c.data.update(sources=_sources(1024, "stable"), source_temperature=0.7, masked_lm_prob=0.3)
    long = {"data.max_seq_len": 8192,
            "model.rope_theta": 160_000.0, "model.remat_policy": "full",
            "train.batch_size": 32, "init.optimizer": "keep", "train.warmup_steps": 0,
            # 8192 × 32 in one pass sits at a v3 core's 16 GiB; 2 microbatches need 8.82
            "train.microbatches": 2, "train.batch_ramp": ()}
    c.phases = (
        {"name": "stable1024", "overrides": {
            "model.rope_theta": 10_000.0, "train.schedule": "constant",
            "train.num_steps": 150_000,
            # mmBERT's batch ramp: small batches early, in tokens (64 × 1024 a step).
            "train.batch_ramp": ((1_000_000_000, 64), (4_000_000_000, 128))}},
        {"name": "extend8192", "overrides": {
            **long, "train.schedule": "constant", "train.num_steps": 25_000,
            "data.sources": _sources(8192, "extend"),
            "data.masked_lm_prob": 0.15, "data.source_temperature": 0.5}},
        {"name": "decay8192", "overrides": {
            **long, "init.mode": "continue", "train.decay_steps": 5_000,
            "data.sources": _sources(8192, "decay"),
            "train.num_steps": 30_000, "data.masked_lm_prob": 0.05,
            "data.source_temperature": 0.3}},
    )
    return c
