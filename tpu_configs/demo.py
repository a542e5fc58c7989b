r"""Tiny BERT pretrained on CPU in a few minutes on Korean text that installs
from package registries: LibreOffice's Korean help (Debian's
libreoffice-help-ko, fetched by `make demo`), KoNLPy's constitution + National
Assembly bills and ChatterBot's Korean dialogues; the vocabulary also reads
우리말샘's headwords. This is what `make demo` runs; it ends with fill-mask.

    kjax demo --workdir runs/demo [--scheme sentencepiece|morph-sp|multihot]
  or step by step:
    kjax tokenizer train --config tpu_configs/demo.py
    kjax prepare         --config tpu_configs/demo.py
    kjax train           --config tpu_configs/demo.py --workdir runs/demo
    kjax eval            --config tpu_configs/demo.py --workdir runs/demo
    kjax fill-mask       --workdir runs/demo "오늘 날씨[MASK] 정말 좋네요."
    kjax fill-mask       --workdir runs/demo --check

Expected: README ("What the demo prints") shows the output of a fresh run:
wall time, the MLM loss and accuracy by step, and fill-mask hit rates on the
32 everyday sentences of kjax/analysis/data/everyday_fill_mask.tsv; [UNK] on
KLUE's dev texts: docs/PRETRAINING.md.

Why this recipe (docs/EXPERIMENTS.md, "Demo fill-mask"): at 128 tokens a row,
MLM + NSP and whole-eojeol masking, the tiny model sat on the unigram plateau
for all 300-600 steps a demo can afford (eval accuracy 0.125 = always the bare
▁ piece); rows of 32 tokens (a sentence or two), one piece masked at a time
(particles and endings become targets beside their stems), 30 % masking, no
dropout and no NSP leave the plateau within ~300 steps. BPE over the prose and
the headwords makes few bare ▁ pieces (1.5 % of KLUE tokens; unigram: 11 %).
The price: position embeddings past 32 stay as initialised (the table keeps
128 rows for fine-tuning, finetune.max_seq_len), so this model reads short
texts best; the UKnowBERT/morph demos (kjax/cli/demo.py CLASSIC_DEMO) keep rows
of 128.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
64 (8 per core) the train step needs 0.03 GiB per core of 16 (arguments 0.00,
temporaries 0.03): fits.
`kjax compile --config tpu_configs/demo.py --topology v3-8` says it again; with
`--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "demo"
    c.model.update(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=4,
                   intermediate_size=256, max_position_embeddings=128,
                   dtype="float32", dropout_rate=0.0, attention_dropout_rate=0.0)
    # The vocabulary reads 우리말샘's 969k headwords besides the prose, all of it
    # (input_sentence_size 0): [UNK] stays under 0.3 % of KLUE dev tokens.
    c.tokenizer.update(vocab_size=8000, model_type="bpe", path="runs/demo_data/tokenizer/sp",
                       corpus="konlpy,chatterbot-ko,libreoffice-ko,urimalsam",
                       character_coverage=1.0, input_sentence_size=0)
    c.data.update(corpus="konlpy,chatterbot-ko,libreoffice-ko", document_per_file=True,
                  dir="runs/demo_data/examples", max_seq_len=32, max_predictions_per_seq=10,
                  masked_lm_prob=0.3, mask_unit="token", nsp_prob=0.0, docs_per_chunk=200,
                  eval_every_nth_doc=6)
    c.train.update(batch_size=64, num_steps=1000, learning_rate=2e-3, warmup_steps=60,
                   nsp_weight=0.0, log_every=50, eval_every=250, eval_batches=4,
                   checkpoint_every=250)
    return c
