#!/usr/bin/env bash
# SHAKE's six pretrained variants at demo size, then fine-tuned on KLUE /
# KorQuAD slices with 3 seeds (docs/FINETUNE.md "Sanity table", config and
# expected result: experiments/configs/shake_sanity.py). Fine-tuning uses no
# shaking (bf 0), as the thesis's "+0.3 pretraining helps even with no
# manipulation at fine-tuning" (METHODS §1.6); variants 5-6 keep their input mode.
#   bash experiments/shake_sanity.sh [--data DIR] [STAGE[_VARIANT] ...]
#       (default stages: pretrain ner nli qa; e.g. `ner_pos_plus`: NER of variant pos_plus only)
# DIR (or $DATA): the KLUE v1.1 and KorQuAD 1.0 dev files as docs/DATA.md lays
# them out (where to get them, versions, licences); the fine-tuning stages need it.
set -euo pipefail
DATA=${DATA:-}
STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --data) DATA=${2:?--data needs a folder}; shift 2 ;;
    --data=*) DATA=${1#--data=}; shift ;;
    *) STAGES+=("$1"); shift ;;
  esac
done
KJAX=${KJAX:-.venv/bin/kjax}
RUNS=${RUNS:-runs/shake_sanity}
C=experiments/configs/shake_sanity.py
declare -A KEYS=(
  [baseline]=""
  [pos_plus]="--config.shake.variant=pos --config.model.shake_factor=0.3"
  [pos_minus]="--config.shake.variant=pos --config.model.shake_factor=-0.3"
  [random]="--config.shake.variant=random --config.shake.p=0.08 --config.model.shake_factor=0.2"
  [shared_position]="--config.model.input_mode=shared_position"
  [merged]="--config.model.input_mode=merged --config.train.mlm_loss=eq9"
)
VARIANTS="baseline pos_plus pos_minus random shared_position merged"
# learning_rate=0: the size rule (5e-4 at hidden 128)
NER="--task ner --train $DATA/klue/klue-ner-v1.1_dev.tsv --config.finetune.max_examples=400
    --config.finetune.max_seq_len=64 --config.finetune.epochs=10 --config.finetune.patience=0
    --config.finetune.learning_rate=0"
NLI="--task pair --train $DATA/klue/klue-nli-v1.1_dev.json --config.finetune.split=(0.8,0.2)
    --config.finetune.max_seq_len=64 --config.finetune.learning_rate=0"
QA="--task qa --train $DATA/korquad/KorQuAD_v1.0_dev.json --config.finetune.split=(0.8,0.2)
    --config.finetune.max_examples=300 --config.finetune.doc_stride=64 --config.finetune.epochs=2
    --config.finetune.patience=0 --config.finetune.learning_rate=0"
[ ${#STAGES[@]} -gt 0 ] || STAGES=(pretrain ner nli qa)
for arg in "${STAGES[@]}"; do
  stage=${arg%%_*}; only=${arg#"$stage"}; only=${only#_}
  for v in ${only:-$VARIANTS}; do
    W=$RUNS/$v
    case $stage in
      pretrain)
        [ -f runs/shake_sanity_data/tokenizer/sp.model ] || $KJAX tokenizer train --config $C
        $KJAX prepare --config $C
        # shellcheck disable=SC2086
        $KJAX train --config $C --workdir $W ${KEYS[$v]} ;;   # evaluates at 100, 200, 300
      ner|nli|qa)
        [ -n "$DATA" ] || { echo "$0: $stage needs the data folder: --data DIR (docs/DATA.md)" >&2
                            exit 2; }
        T=${stage^^}
        # shellcheck disable=SC2086
        $KJAX finetune ${!T} --config $W/kjax_config.py --init $W --seeds 1,2,3 \
            --out $RUNS/ft/${stage}_$v ;;
    esac
  done
done
# Fine-tuning *with* shaking (run by hand, 2026-11-25): variant 2 at bf +0.3 in
# fine-tuning and inference, and the thesis's four combinations (--sweep:
# fine-tune at bf ∓0.3 × infer at bf 0 / +0.3) for variants 1 and 2, NER only.
#   W=$RUNS/pos_plus
#   $KJAX finetune $NER --config $W/kjax_config.py --init $W --seeds 1,2,3 \
#       --out $RUNS/ft/ner_pos_plus_shaken \
#       --config.finetune.shake.bf_train=0.3 --config.finetune.shake.bf_infer=0.3
#   for v in pos_plus baseline; do W=$RUNS/$v
#     $KJAX finetune $NER --config $W/kjax_config.py --init $W --seeds 1,2,3 --sweep \
#         --out $RUNS/ft/ner_${v}_sweep
#   done
