"""Shared builders for the preset config files in tpu_configs/ (the files
stay short: a header with the command and the expected result, then one
call here). Each starts from the full tree, `defaults()`, and sets the keys
it changes: a typo is an error at its line."""
from __future__ import annotations

from kjax.config.load import ConfigDict, defaults

# METHODS Table 13: small = 4 layers / 4 heads / 256 hidden, base = 12 / 12 / 768.
SIZES = {"small": dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
         "base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072)}
OBJECTIVES = ("mlm", "nsp", "hypernym", "sense", "verb")


def uknow_config(name: str, size: str, multihot: bool, objectives: tuple[str, ...]) -> ConfigDict:
    """A METHODS Table 22 variant: one-hot (BERT) or multi-hot (mBERT/UKnowBERT)
    input and objectives ① MLM ② NSP ③ hypernym ④ sense vector ⑤ verb relation."""
    unknown = set(objectives) - set(OBJECTIVES)
    assert not unknown and "mlm" in objectives, unknown
    c = defaults()
    c.name = name
    seq = 256  # Table 13: 256 for small and for the knowledge runs of base
    c.model.update(vocab_size=32000, max_position_embeddings=512, **SIZES[size])
    c.tokenizer.update(scheme="multihot" if multihot else "morph-sp", vocab_size=32000,
                       path=f"runs/{name}_data/tokenizer/vocab")
    c.data.update(dir=f"runs/{name}_data/examples", max_seq_len=seq,
                  max_predictions_per_seq=40, mask_unit="morpheme")
    c.train.update(batch_size=128, num_steps=1_000_000, learning_rate=1e-4,
                   warmup_steps=10_000, nsp_weight=1.0 if "nsp" in objectives else 0.0)
    if multihot:
        c.model.input_mode = "multihot"
        c.train.mlm_loss = "eq9"
    c.knowledge.update(hypernym_weight=1.0 if "hypernym" in objectives else 0.0,
                       sense_weight=1.0 if "sense" in objectives else 0.0,
                       verb_weight=1.0 if "verb" in objectives else 0.0)
    return c


# METHODS §1.5: the six RoBERTa-small pretraining variants of SHAKE.
SHAKE_VARIANTS = {
    "baseline": {},
    "pos_plus": {"model.shake_factor": 0.3, "shake.variant": "pos"},
    "pos_minus": {"model.shake_factor": -0.3, "shake.variant": "pos"},
    "random": {"model.shake_factor": 0.2, "shake.variant": "random", "shake.p": 0.08},
    "shared_position": {"model.input_mode": "shared_position"},
    "merged": {"model.input_mode": "merged", "train.mlm_loss": "eq9"},
}


def shake_config(variant: str) -> ConfigDict:
    """RoBERTa-small as SHAKE pretrains it (6 layers, 12 heads, 768 hidden, no
    NSP, dynamic masking) on a morph-sp vocabulary (every variant but the
    random one needs POS tags; all six share it so they stay comparable)."""
    name = f"shake_{variant}"
    c = defaults()
    c.name = name
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=6, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512, layer_norm_eps=1e-5)
    c.tokenizer.update(scheme="morph-sp", vocab_size=32000,
                       path="runs/shake_data/tokenizer/sp")   # one vocabulary for all six
    c.data.update(dir="runs/shake_data/examples", max_seq_len=512, max_predictions_per_seq=80,
                  masking="dynamic", nsp_prob=0.0, mask_unit="morpheme")
    c.train.update(batch_size=256, num_steps=500_000, learning_rate=6e-4, warmup_steps=24_000,
                   nsp_weight=0.0, b2=0.98)
    for key, value in SHAKE_VARIANTS[variant].items():
        section, leaf = key.split(".")
        c[section][leaf] = value
    return c


MAX_PREDICTIONS = {128: 20, 512: 80}  # BERT's settings per sequence length


def slice_config(slice_name: str, devices: int, batch_size: int, num_steps: int,
                 learning_rate: float, seq_len: int = 512) -> ConfigDict:
    """BERT-base on one TPU slice (tpu_configs/v*.py): bf16 compute, fp32
    params, data parallel over every device, gs:// placeholders for the data."""
    c = defaults()
    c.name = f"bert_base_{slice_name.replace('-', '_')}"
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512,
                   dtype="bfloat16", param_dtype="float32", remat_policy="none")
    c.tokenizer.update(vocab_size=32000, path="gs://YOUR_BUCKET/tokenizer/sp")
    examples = "examples" if seq_len == 512 else f"examples{seq_len}"
    c.data.update(dir=f"gs://YOUR_BUCKET/{examples}", max_seq_len=seq_len,
                  max_predictions_per_seq=MAX_PREDICTIONS[seq_len])
    c.train.update(batch_size=batch_size, num_steps=num_steps, learning_rate=learning_rate,
                   warmup_steps=10_000, log_every=100, eval_every=5000,
                   checkpoint_every=2000, keep_checkpoints=3)
    c.mesh.update(data=devices, fsdp=1, tensor=1)
    return c


# The modern recipe (ModernBERT, Warner et al. 2024; kjax/model/modern.py):
# MLM alone at 30 % masking, no dropout, 128-token local windows with a global
# layer every third, RoPE θ 160k (global) / 10k (local), LayerNorm eps 1e-5.
MODERN_SIZES = {"small": dict(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=384),
                "base": dict(hidden_size=768, num_layers=22, num_heads=12, intermediate_size=1152),
                "large": dict(hidden_size=1024, num_layers=28, num_heads=16,
                              intermediate_size=2624)}


def modern_overrides(max_seq_len: int) -> dict[str, object]:
    """The keys that make any config the modern recipe (presets and `kjax demo
    --arch modern` share them)."""
    return {"model.arch": "modern", "model.dropout_rate": 0.0,
            "model.attention_dropout_rate": 0.0, "model.layer_norm_eps": 1e-5,
            "model.local_attention": 128, "model.global_attn_every_n_layers": 3,
            "model.rope_theta": 160_000.0, "model.local_rope_theta": 10_000.0,
            "train.nsp_weight": 0.0, "data.nsp_prob": 0.0, "data.masked_lm_prob": 0.3,
            "data.max_predictions_per_seq": max(1, round(0.3 * max_seq_len * 1.05))}


def modern_config(name: str, size: str, max_seq_len: int, context: int = 8192) -> ConfigDict:
    """A modern encoder of `size` trained on rows of `max_seq_len` positions,
    able to run contexts up to `context` (RoPE: no position table to grow)."""
    c = defaults()
    c.name = name
    c.model.update(vocab_size=32000, max_position_embeddings=context, **MODERN_SIZES[size])
    c.tokenizer.update(vocab_size=32000, path=f"runs/{name}_data/tokenizer/sp")
    c.data.update(dir=f"runs/{name}_data/examples", max_seq_len=max_seq_len)
    c.train.update(batch_size=256, num_steps=200_000, learning_rate=8e-4, warmup_steps=3_000,
                   weight_decay=1e-5, b2=0.98, eps=1e-6)
    for key, value in modern_overrides(max_seq_len).items():
        section, leaf = key.split(".")
        c[section][leaf] = value
    return c
