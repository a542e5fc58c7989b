"""Shared builders for the preset config files in tpu_configs/ (the files
stay short: a header with the command and the expected result, then one
call here)."""
from __future__ import annotations

from kjax.config import ConfigDict

# METHODS Table 13: small = 4 layers / 4 heads / 256 hidden, base = 12 / 12 / 768.
SIZES = {"small": dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
         "base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072)}
OBJECTIVES = ("mlm", "nsp", "hypernym", "sense", "verb")


def uknow_config(name: str, size: str, multihot: bool, objectives: tuple[str, ...]) -> ConfigDict:
    """A METHODS Table 22 variant: one-hot (BERT) or multi-hot (mBERT/UKnowBERT)
    input and objectives ① MLM ② NSP ③ hypernym ④ sense vector ⑤ verb relation."""
    unknown = set(objectives) - set(OBJECTIVES)
    assert not unknown and "mlm" in objectives, unknown
    c = ConfigDict()
    c.name = name
    seq = 256  # Table 13: 256 for small and for the knowledge runs of base
    c.model = dict(vocab_size=32000, max_position_embeddings=512, **SIZES[size])
    c.tokenizer = dict(scheme="multihot" if multihot else "morph-sp", vocab_size=32000,
                       path=f"runs/{name}_data/tokenizer/vocab")
    c.data = dict(dir=f"runs/{name}_data/examples", max_seq_len=seq, max_predictions_per_seq=40,
                  mask_unit="morpheme")
    c.train = dict(batch_size=128, num_steps=1_000_000, learning_rate=1e-4, warmup_steps=10_000,
                   nsp_weight=1.0 if "nsp" in objectives else 0.0)
    if multihot:
        c.model.input_mode = "multihot"
        c.train.mlm_loss = "eq9"
    c.knowledge = dict(hypernym_weight=1.0 if "hypernym" in objectives else 0.0,
                       sense_weight=1.0 if "sense" in objectives else 0.0,
                       verb_weight=1.0 if "verb" in objectives else 0.0)
    return c
