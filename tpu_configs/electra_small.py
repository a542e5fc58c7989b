r"""ELECTRA-Small as KoELECTRA-Small-v3 trained it (Clark et al. 2020, "ELECTRA:
Pre-training Text Encoders as Discriminators Rather Than Generators", ICLR;
monologg/KoELECTRA's README, "Pretraining Details"): a discriminator of 12
layers, 256 hidden, 4 heads, 1024 FFN on embeddings 128 wide, and a generator
of the same size (KoELECTRA-Small follows ELECTRA-Small++: generator size 1.0),
sharing the embeddings; L = L_MLM + 50 · L_Disc (METHODS §6), 15 % of tokens
masked, rows of 512, batch 512, Adam lr 5e-4 after 10k warmup steps, linear
decay, 800k steps (KoELECTRA-Small-v3: 7 days on a v3-8).

    kjax tokenizer train --config tpu_configs/electra_small.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/electra_small.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/electra_small.py --workdir gs://BUCKET/electra_small
    kjax export  --config tpu_configs/electra_small.py --workdir gs://BUCKET/electra_small --out hf/

Expected: 13.7M parameters in the discriminator and as many in the generator,
23.3M in all (they share the 4.2M of the embedding tables; KoELECTRA-Small:
53 MB each on its 35k vocabulary); `kjax export` writes
hf/discriminator (ElectraForPreTraining) and hf/generator (ElectraForMaskedLM).
KoELECTRA-Small-v3 reports NSMC 89.36, Naver NER 85.40, KorQuAD dev EM/F1
82.11/91.13 after fine-tuning on its 34 GB corpus and 35k WordPiece vocabulary;
this preset keeps kjax's 32k sentencepiece vocabulary. The paper's
ELECTRA-Small (its Table 6: generator ¼, rows of 128, batch 128, 1M steps)
is --config.model.generator_hidden_size=64 --config.data.max_seq_len=128
--config.data.max_predictions_per_seq=19 --config.train.batch_size=128
--config.train.microbatches=1 --config.train.num_steps=1000000.

The batch runs in two microbatches (32 rows per core each, the whole batch's
step: kjax/train/accumulation.py); the memory below is that split's step.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
512 (64 per core) the train step needs 4.22 GiB per core of 16 (arguments 0.04,
temporaries 4.18): fits.
`kjax compile --config tpu_configs/electra_small.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "electra_small"
    c.model.update(arch="electra", vocab_size=32000, hidden_size=256, num_layers=12,
                   num_heads=4, intermediate_size=1024, embedding_size=128,
                   max_position_embeddings=512, generator_hidden_size=256)
    c.tokenizer.update(vocab_size=32000, path="runs/electra_small_data/tokenizer/sp")
    # ELECTRA masks single tokens (15 %, int(0.155 · 512) = 79 slots) and has no NSP:
    # sentence B always continues A.
    c.data.update(dir="runs/electra_small_data/examples", max_seq_len=512,
                  max_predictions_per_seq=79, mask_unit="token", nsp_prob=0.0)
    c.train.update(batch_size=512, microbatches=2, num_steps=800_000, learning_rate=5e-4,
                   warmup_steps=10_000, nsp_weight=0.0, rtd_weight=50.0)
    return c
