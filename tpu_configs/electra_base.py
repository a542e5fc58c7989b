r"""ELECTRA-Base as KoELECTRA-Base-v3 trained it (Clark et al. 2020, "ELECTRA:
Pre-training Text Encoders as Discriminators Rather Than Generators", ICLR,
Table 6; monologg/KoELECTRA's README, "Pretraining Details"): a BERT-base
discriminator (12 layers, 768 hidden, 12 heads, 3072 FFN, embeddings 768) and
a generator ⅓ as wide (256 hidden, 4 heads, 1024 FFN, 12 layers) with its own
projection from the shared 768-wide embeddings; L = L_MLM + 50 · L_Disc
(METHODS §6), 15 % of tokens masked, rows of 512, batch 256, Adam lr 2e-4
after 10k warmup steps, linear decay, 1.5M steps (KoELECTRA-Base-v3: 14 days
on one v3-8).

    kjax tokenizer train --config tpu_configs/electra_base.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/electra_base.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/electra_base.py --workdir gs://BUCKET/electra_base
    kjax export  --config tpu_configs/electra_base.py --workdir gs://BUCKET/electra_base --out hf/

Expected: 110.6M parameters in the discriminator (bert_base.py's encoder) and
34.9M in the generator, 120.5M in all (they share the 25M of the embedding
tables); `kjax export` writes hf/discriminator
(ElectraForPreTraining) and hf/generator (ElectraForMaskedLM).
KoELECTRA-Base-v3 reports NSMC 90.63, Naver NER 88.11, KorQuAD dev EM/F1
84.83/93.45 after fine-tuning on its 34 GB corpus and 35k WordPiece
vocabulary; this preset keeps kjax's 32k sentencepiece vocabulary.

The batch runs in two microbatches of 128 (16 rows per core, bert_base.py's
load, which fits; bert_base alone at batch 256 in one pass fits only just,
docs/TPU.md §15's table): the whole batch's step, its gradients reduced once
(kjax/train/accumulation.py); the memory below is that split's step.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.90 GiB per core of 16 (arguments 0.19,
temporaries 7.71): fits.
`kjax compile --config tpu_configs/electra_base.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "electra_base"
    c.model.update(arch="electra", vocab_size=32000, hidden_size=768, num_layers=12,
                   num_heads=12, intermediate_size=3072, max_position_embeddings=512,
                   generator_hidden_size=256)
    c.tokenizer.update(vocab_size=32000, path="runs/electra_base_data/tokenizer/sp")
    # ELECTRA masks single tokens (15 %, int(0.155 · 512) = 79 slots) and has no NSP:
    # sentence B always continues A.
    c.data.update(dir="runs/electra_base_data/examples", max_seq_len=512,
                  max_predictions_per_seq=79, mask_unit="token", nsp_prob=0.0)
    c.train.update(batch_size=256, microbatches=2, num_steps=1_500_000, learning_rate=2e-4,
                   warmup_steps=10_000, nsp_weight=0.0, rtd_weight=50.0)
    return c
