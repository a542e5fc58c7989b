r"""SHAKE's six pretrained variants (METHODS §1.5) at demo size on CPU: one
morph-sp vocabulary and one example set, identical model, data, steps and
seed; only the variant's keys differ (kjax.config.presets.SHAKE_VARIANTS, the
same ones tpu_configs/shake_*.py set at RoBERTa-small size). This file is
variant 1 (baseline); the others add their keys on the command line:

    C=experiments/configs/shake_sanity.py
    kjax tokenizer train --config $C        # once: runs/shake_sanity_data/tokenizer
    kjax prepare         --config $C        # once: runs/shake_sanity_data/examples
    kjax train --config $C --workdir runs/shake_sanity/baseline
    kjax train --config $C --workdir runs/shake_sanity/pos_plus \
        --config.shake.variant=pos --config.model.shake_factor=0.3
    kjax train --config $C --workdir runs/shake_sanity/pos_minus \
        --config.shake.variant=pos --config.model.shake_factor=-0.3
    kjax train --config $C --workdir runs/shake_sanity/random \
        --config.shake.variant=random --config.shake.p=0.08 --config.model.shake_factor=0.2
    kjax train --config $C --workdir runs/shake_sanity/shared_position \
        --config.model.input_mode=shared_position
    kjax train --config $C --workdir runs/shake_sanity/merged \
        --config.model.input_mode=merged --config.train.mlm_loss=eq9

(experiments/shake_sanity.sh runs all of it plus the fine-tunings.) Each
workdir records its full config in kjax_config.py: fine-tune with
`kjax finetune --config runs/shake_sanity/V/kjax_config.py --init runs/shake_sanity/V`.

Expected (2-core shared CPU, measured 2026-11-25; docs/FINETUNE.md "Sanity
table"): tokenizer 5 s, prepare 7 s (437 train / 70 eval examples), 2.8-5.6
min per pretraining. Eval MLM loss at step 300: 5.5407 baseline, 5.5405-5.5411
for POS ±0.3 and random (indistinguishable: Eq. 1 scales with |score|, and a
300-step model's logits are small), 5.5529 shared position, 5.4428 merged (Eq. 9,
not comparable); MLM accuracy 0.077-0.084. The thesis's claim (SHAKE Fig. 2:
lowest eval MLM loss for bf = ±0.3) is about RoBERTa-small after 3.2 B tokens;
300 steps on a 30-document corpus cannot test it, only show that every
variant pretrains and fine-tunes.
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "shake_sanity"
    # The demo's encoder (tpu_configs/demo.py as of 2026-11-25), frozen here.
    c.model.update(vocab_size=1000, hidden_size=128, num_layers=2, num_heads=4,
                   intermediate_size=256, max_position_embeddings=128,
                   dtype="float32", dropout_rate=0.1, attention_dropout_rate=0.1)
    # morph-sp: pieces lined up with Kiwi morphemes, so POS B (variants 2-3),
    # shared position ids (5) and merged positions (6) have their pairs. The
    # vocabulary is trained on the prose, at the size it supports (as
    # `kjax demo --scheme morph-sp` does).
    c.tokenizer.update(scheme="morph-sp", vocab_size=1000, corpus="", character_coverage=0.9995,
                       path="runs/shake_sanity_data/tokenizer/sp")
    # SHAKE's RoBERTa recipe: no NSP, dynamic masking of whole morphemes.
    c.data.update(corpus="konlpy,chatterbot-ko", document_per_file=True,
                  dir="runs/shake_sanity_data/examples", max_seq_len=128,
                  max_predictions_per_seq=20, docs_per_chunk=200, eval_every_nth_doc=6,
                  masking="dynamic", nsp_prob=0.0, mask_unit="morpheme")
    c.train.update(batch_size=32, num_steps=300, learning_rate=1e-3, warmup_steps=30,
                   nsp_weight=0.0, log_every=25, eval_every=100, eval_batches=0,
                   checkpoint_every=100)
    return c
