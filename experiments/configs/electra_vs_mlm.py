r"""ELECTRA vs MLM-only BERT at equal pretraining compute, at demo size on CPU
(docs/EXPERIMENTS.md, "ELECTRA vs MLM BERT"; experiments/electra_vs_mlm.sh
runs everything). This file is the BERT arm: the demo's encoder
(tpu_configs/demo.py as of 2026-12-02: 2 layers x 128, 4 heads, FFN 256, no
dropout), the demo's vocabulary and corpus, MLM alone (NSP off), token masking
at 30 %. The ELECTRA arm adds `kjax demo --electra`'s keys (kjax/cli/demo.py
ELECTRA_DEMO) on the command line:

    C=experiments/configs/electra_vs_mlm.py
    kjax tokenizer train --config $C      # once: runs/electra_vs_mlm/data/tokenizer
    kjax prepare         --config $C      # once: runs/electra_vs_mlm/data/examples
    kjax train --config $C --workdir runs/electra_vs_mlm/electra_s0 \
        --config.model.arch=electra --config.train.rtd_weight=50 \
        --config.train.learning_rate=1e-3 --config.train.num_steps=N_ELECTRA
    kjax train --config $C --workdir runs/electra_vs_mlm/bert_s0 \
        --config.train.num_steps=N_BERT     # N_BERT: equal FLOPs (the script computes it)

Measured 2026-12-02 (docs/EXPERIMENTS.md, "ELECTRA vs MLM-only BERT at equal
pretraining compute"): N_ELECTRA 800 → N_BERT 858, 6.54e12 FLOPs each; 5.4-9.4
min a run on the shared 2-core VM; tokenizer 7 s, prepare 5 s (5,743 train /
1,301 held-out rows of 64 tokens).

Differences from tpu_configs/demo.py, and why:
- rows of 64 tokens (demo: 32), 20 masked slots (30 % of 64, rounded up),
  batch 32: the same 2,048 tokens a step as the demo, but fine-tuning reads
  64-token inputs, and the position embeddings past 32 would otherwise stay
  as initialised in both arms.
- its own data folder (runs/electra_vs_mlm/data), so `kjax demo` runs never
  share or clobber it.
- eval over all held-out examples (eval_batches 0) every 250 steps and at the
  last step, so every run is scored on the same 1,301 held-out rows.
Both arms read the very same examples and masks (data.seed fixed); the
pretraining seed is train.seed (parameters and dropout; dropout is 0 here, so
the generator's Gumbel draws are the other thing it moves).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "electra_vs_mlm"
    c.model.update(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=4,
                   intermediate_size=256, max_position_embeddings=128,
                   dtype="float32", dropout_rate=0.0, attention_dropout_rate=0.0)
    c.tokenizer.update(vocab_size=8000, model_type="bpe",
                       path="runs/electra_vs_mlm/data/tokenizer/sp",
                       corpus="konlpy,chatterbot-ko,libreoffice-ko,urimalsam",
                       character_coverage=1.0, input_sentence_size=0)
    c.data.update(corpus="konlpy,chatterbot-ko,libreoffice-ko", document_per_file=True,
                  dir="runs/electra_vs_mlm/data/examples", max_seq_len=64,
                  max_predictions_per_seq=20, masked_lm_prob=0.3, mask_unit="token",
                  nsp_prob=0.0, docs_per_chunk=200, eval_every_nth_doc=6)
    c.train.update(batch_size=32, num_steps=800, learning_rate=2e-3, warmup_steps=60,
                   nsp_weight=0.0, log_every=50, eval_every=250, eval_batches=0,
                   checkpoint_every=1000)
    return c
