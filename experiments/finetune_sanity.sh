#!/usr/bin/env bash
# Fine-tuning sanity runs on the CPU demo models (docs/FINETUNE.md "Sanity
# table"). Needs the demo pretraining runs and the data folder
#   bash experiments/finetune_sanity.sh --data DIR      (or DATA=DIR)
# DIR: the KLUE v1.1 and KorQuAD 1.0 dev files as docs/DATA.md lays them out
# (where to get them, versions, licences). The demo runs:
#   kjax demo                      → runs/demo            (one-hot, sentencepiece)
#   kjax demo --scheme multihot    → runs/demo_multihot   (UKnowBERT's multi-hot input)
# The SHAKE variants pretrained with shaking: experiments/shake_sanity.sh.
# Each line: KLUE / KorQuAD dev files carved into seeded splits
# (finetune.split, split_seed 12345), `max_examples` per split, 3 seeds.
set -euo pipefail
DATA=${DATA:-}
case ${1:-} in
  --data) DATA=${2:?--data needs a folder} ;;
  --data=*) DATA=${1#--data=} ;;
esac
[ -n "$DATA" ] || { echo "usage: $0 --data DIR (KLUE and KorQuAD dev files: docs/DATA.md)" >&2
                    exit 2; }
KJAX=${KJAX:-.venv/bin/kjax}
OUT=${OUT:-runs/ft/sanity}
# learning_rate=0: the size rule (the demo workdirs' recorded configs may hold 5e-5)
NER="--task ner --train $DATA/klue/klue-ner-v1.1_dev.tsv --config.finetune.max_examples=400
    --config.finetune.max_seq_len=64 --config.finetune.epochs=10 --config.finetune.patience=0
    --config.finetune.learning_rate=0"
QA="--task qa --train $DATA/korquad/KorQuAD_v1.0_dev.json --config.finetune.split=(0.8,0.2)
    --config.finetune.max_examples=300 --config.finetune.doc_stride=64 --config.finetune.epochs=2
    --config.finetune.patience=0 --config.finetune.learning_rate=0"
for init in demo demo_multihot; do   # QA: seed 0 (2026-11-24), then seeds 1,2,3 (2026-11-25)
  $KJAX finetune $QA --init runs/$init --out $OUT/qa_$init
  $KJAX finetune $QA --init runs/$init --seeds 1,2,3 --out $OUT/qa3_$init
done
# the shaken variant: the one-hot demo model fine-tuned and inferred with POS B (bf +0.3)
$KJAX finetune $NER --init runs/demo --out $OUT/demo_shaken_ner --seeds 1,2,3 \
    --config.finetune.shake.bf_train=0.3 --config.finetune.shake.bf_infer=0.3
# progress curves: every saved step of both demo runs, one PNG
$KJAX finetune $NER --init runs/demo --every-checkpoint --seeds 1,2,3 --out $OUT/progress_demo
$KJAX finetune $NER --init runs/demo_multihot --every-checkpoint --seeds 1,2,3 \
    --out $OUT/progress_demo_multihot --compare $OUT/progress_demo
