#!/bin/bash
# The runs behind tpu_configs/demo.py's recipe (docs/EXPERIMENTS.md, "Demo
# fill-mask"): the demo model (2 layers x 128) on the demo corpus with one
# change set at a time; each run is prepared, trained, evaluated and scored on
# the fill-mask check set (kjax fill-mask --check). Run from the repository
# root after `make demo` (it reuses runs/demo_data/tokenizer); ~10-15 min a
# run on a busy 2-core CPU.
#   bash experiments/demo_recipe.sh [RUN ...]     (default: all of them)
set -euo pipefail
OUT=${OUT:-runs/demo_recipe}
KJAX=${KJAX:-.venv/bin/kjax}
CLASSIC="--config.data.max_seq_len=128 --config.data.max_predictions_per_seq=20
 --config.data.masked_lm_prob=0.15 --config.data.nsp_prob=0.5 --config.data.mask_unit=eojeol
 --config.model.dropout_rate=0.1 --config.model.attention_dropout_rate=0.1
 --config.train.batch_size=32 --config.train.learning_rate=1e-3 --config.train.warmup_steps=30
 --config.train.nsp_weight=1.0 --config.train.num_steps=600 --config.train.eval_every=100
 --config.train.checkpoint_every=100"
TOKEN_MLM="--config.data.mask_unit=token --config.train.nsp_weight=0"
NODROP_30="--config.model.dropout_rate=0 --config.model.attention_dropout_rate=0
 --config.data.masked_lm_prob=0.3 --config.data.max_predictions_per_seq=40
 --config.train.learning_rate=2e-3 --config.train.warmup_steps=60"
declare -A RUNS=(
  [A_classic]="$CLASSIC"
  [B_token_mlm]="$CLASSIC $TOKEN_MLM"
  [C_token_mlm_lr3e-3]="$CLASSIC $TOKEN_MLM --config.train.learning_rate=3e-3 --config.train.warmup_steps=60"
  [D_token_mlm_nodrop_30]="$CLASSIC $TOKEN_MLM $NODROP_30"
  [G_seq64]="$CLASSIC $TOKEN_MLM $NODROP_30 --config.data.nsp_prob=0 --config.data.max_seq_len=64
    --config.data.max_predictions_per_seq=20 --config.train.num_steps=1000
    --config.train.eval_every=250 --config.train.checkpoint_every=250"
  [F_seq32_demo]=""   # tpu_configs/demo.py as it is
)
mkdir -p "$OUT"
for run in "${@:-${!RUNS[@]}}"; do
  # shellcheck disable=SC2086
  args="--config tpu_configs/demo.py --config.data.dir=$OUT/data_$run ${RUNS[$run]}"
  $KJAX prepare $args > "$OUT/$run.prepare.log"
  $KJAX train $args --workdir "$OUT/$run"
  $KJAX fill-mask --workdir "$OUT/$run" --check | tail -1
done
