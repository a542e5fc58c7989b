#!/usr/bin/env bash
# ELECTRA vs MLM-only BERT at equal pretraining compute, demo size, on CPU
# (docs/EXPERIMENTS.md, "ELECTRA vs MLM-only BERT at equal pretraining compute").
#   bash experiments/electra_vs_mlm.sh --data DIR [STAGE[_RUN] ...]
#       stages: data pretrain nli ner nerall ftseeds control (default: all, in order);
#       e.g. `pretrain_electra_s1` or `ner_bert_s2` runs one run's stage only
# DIR (or $DATA): the KLUE v1.1 dev files (docs/DATA.md); either the folder
# holding klue-nli-v1.1_dev.json and klue-ner-v1.1_dev.tsv or its parent
# (DIR/klue/...). The fine-tuning stages (nli ner nerall ftseeds control) need it.
# Measured 2026-12-02 on the shared 2-core VM: ~68 min for everything; at 800
# ELECTRA steps BERT is ahead on whole-file NER (entity F1 0.269 vs 0.243,
# random weights 0.235) and NLI stays a constant predictor (the doc's tables).
#
# Design:
# - One config, experiments/configs/electra_vs_mlm.py: the demo's encoder
#   (2 layers x 128, 4 heads, FFN 256, no dropout), vocabulary (BPE 8,000 over
#   the demo corpus and 우리말샘's headwords) and corpus, as `kjax demo` builds
#   them, but rows of 64 tokens (20 masked slots, 30 % token masking, batch 32:
#   the demo's 2,048 tokens a step) so that fine-tuning at 64 tokens reads
#   trained position embeddings. Own data folder runs/electra_vs_mlm/data.
# - Arms: BERT = MLM alone (NSP off), lr 2e-3 (the demo's); ELECTRA =
#   `kjax demo --electra`'s keys: model.arch=electra, generator a quarter as
#   wide (32, one head, 2 layers, tables shared), lambda = 50, lr 1e-3 (the
#   rate kjax tuned for the tiny discriminator; docs/PRETRAINING.md "ELECTRA").
#   Both: warmup 60, linear decay, the same examples and dynamic masks.
# - Equal compute: ELECTRA trains $STEPS steps (default 800); BERT trains
#   round(STEPS x F_electra / F_bert) steps, F = kjax.train.step.
#   flops_per_example (ELECTRA's counts its generator and the RTD head at every
#   token), printed below and written to $RUNS/compute.json.
# - Pretraining seeds 0, 1, 2 (train.seed: parameters; with no dropout, also
#   the generator's samples); the data seed is fixed.
# - Fine-tuning: each of the 6 runs once (finetune.seed 0), `kjax finetune
#   --init RUN` (ELECTRA: the discriminator), the size-chosen rate (5e-4 at
#   hidden 128), max_seq_len 64, patience 0, split_seed 12345:
#   NLI = the NLI dev file split 80/20 (2,400 / 600 pairs; NLI_MAX=0: all),
#   $NLI_EPOCHS epochs (225 steps); NER = the NER dev file split 80/20, first
#   $NER_MAX sentences of each side, $NER_EPOCHS epochs (130 steps) — the
#   settings of experiments/shake_sanity.sh. The tables report mean ± std over
#   the 3 pretraining seeds: experiments/electra_vs_mlm_table.py.
# - nerall (added after the first results: NLI stayed a constant predictor in
#   every run and NER's 400-sentence dev side is small): NER on the whole dev
#   file split 80/20 (4,000 / 1,000 sentences), 3 epochs (375 steps), all 6 runs;
#   ftseeds: the same with fine-tuning seeds $FT_SEEDS as well (BERT's lead
#   there, 3 pretraining seeds, was worth telling from fine-tuning noise).
# - control: every fine-tuning above from random weights (`--init none`, the
#   BERT arm's config and tokenizer), fine-tuning seeds $CONTROL_SEEDS: the
#   floor pretraining has to beat.
# Wall times (seconds, each `kjax` command) go to $RUNS/walltime.tsv.
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
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs/electra_vs_mlm}
STEPS=${STEPS:-800}
SEEDS=${SEEDS:-0 1 2}
NLI_MAX=${NLI_MAX:-0} NLI_EPOCHS=${NLI_EPOCHS:-3}
NER_MAX=${NER_MAX:-400} NER_EPOCHS=${NER_EPOCHS:-10}
NERALL_EPOCHS=${NERALL_EPOCHS:-3}
CONTROL_SEEDS=${CONTROL_SEEDS:-0,1,2}
FT_SEEDS=${FT_SEEDS:-1,2}
C=experiments/configs/electra_vs_mlm.py
ELECTRA="--config.model.arch=electra --config.train.rtd_weight=50.0 --config.train.learning_rate=1e-3"
mkdir -p "$RUNS"

timed() {  # timed NAME CMD...: runs CMD, appends "NAME seconds" to walltime.tsv
  local name=$1 t0; shift
  t0=$(date +%s)
  "$@"
  echo -e "$name\t$(( $(date +%s) - t0 ))" >> "$RUNS/walltime.tsv"
}

bert_steps() {  # equal FLOPs: prints the BERT step count, writes compute.json
  $PY - "$C" "$STEPS" "$RUNS/compute.json" $ELECTRA <<'EOF'
import json, sys
from kjax.config import load_config
from kjax.train.step import flops_per_example
path, steps, out, electra = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
f = {}
for arm, extra in (("bert", []), ("electra", electra)):
    c = load_config(path, extra)
    f[arm] = flops_per_example(c.model, c.data.max_seq_len, c.data.max_predictions_per_seq)
    batch = c.train.batch_size
bert = round(steps * f["electra"] / f["bert"])
rec = {"flops_per_example": f, "batch_size": batch,
       "steps": {"electra": steps, "bert": bert},
       "total_flops": {"electra": f["electra"] * batch * steps, "bert": f["bert"] * batch * bert}}
json.dump(rec, open(out, "w"), indent=1)
print(f"flops/example: BERT {f['bert']:.4g}, ELECTRA {f['electra']:.4g} "
      f"(x{f['electra'] / f['bert']:.4f}); ELECTRA {steps} steps = "
      f"{rec['total_flops']['electra']:.4g} FLOPs; BERT {bert} steps = "
      f"{rec['total_flops']['bert']:.4g} FLOPs", file=sys.stderr)
print(bert)
EOF
}

need_data() {
  [ -n "$DATA" ] || { echo "$0: $1 needs the data folder: --data DIR (docs/DATA.md)" >&2; exit 2; }
  [ -f "$DATA/klue-nli-v1.1_dev.json" ] || DATA=$DATA/klue
  [ -f "$DATA/klue-nli-v1.1_dev.json" ] && [ -f "$DATA/klue-ner-v1.1_dev.tsv" ] || {
    echo "$0: no klue-nli-v1.1_dev.json / klue-ner-v1.1_dev.tsv in $DATA (docs/DATA.md)" >&2
    exit 2; }
}

RUNLIST=""
for s in $SEEDS; do RUNLIST+=" electra_s$s bert_s$s"; done
[ ${#STAGES[@]} -gt 0 ] || STAGES=(data pretrain nli ner nerall ftseeds control)
for arg in "${STAGES[@]}"; do
  stage=${arg%%_*}; only=${arg#"$stage"}; only=${only#_}
  case $stage in
    data)
      [ -f runs/electra_vs_mlm/data/tokenizer/sp.model ] || timed tokenizer $KJAX tokenizer train --config $C
      timed prepare $KJAX prepare --config $C > "$RUNS/prepare.log"
      continue ;;
    nli|ner|nerall|ftseeds) need_data "$stage" ;;
    control)  # random weights, the BERT arm's shape and tokenizer; 3 seeds per task
      need_data "$stage"
      cfg=$RUNS/bert_s${SEEDS%% *}/kjax_config.py
      timed nli_random $KJAX finetune --task pair --train "$DATA/klue-nli-v1.1_dev.json" \
          --config "$cfg" --init none --seeds "$CONTROL_SEEDS" --out "$RUNS/ft/nli_random" \
          --config.finetune.split='(0.8,0.2)' --config.finetune.max_examples="$NLI_MAX" \
          --config.finetune.epochs="$NLI_EPOCHS" --config.finetune.max_seq_len=64 \
          --config.finetune.learning_rate=0 --config.finetune.patience=0 \
          > "$RUNS/nli_random.log" 2>&1
      timed ner_random $KJAX finetune --task ner --train "$DATA/klue-ner-v1.1_dev.tsv" \
          --config "$cfg" --init none --seeds "$CONTROL_SEEDS" --out "$RUNS/ft/ner_random" \
          --config.finetune.split='(0.8,0.2)' --config.finetune.max_examples="$NER_MAX" \
          --config.finetune.epochs="$NER_EPOCHS" --config.finetune.max_seq_len=64 \
          --config.finetune.learning_rate=0 --config.finetune.patience=0 \
          > "$RUNS/ner_random.log" 2>&1
      timed nerall_random $KJAX finetune --task ner --train "$DATA/klue-ner-v1.1_dev.tsv" \
          --config "$cfg" --init none --seeds "$CONTROL_SEEDS" --out "$RUNS/ft/nerall_random" \
          --config.finetune.split='(0.8,0.2)' --config.finetune.epochs="$NERALL_EPOCHS" \
          --config.finetune.max_seq_len=64 --config.finetune.learning_rate=0 \
          --config.finetune.patience=0 > "$RUNS/nerall_random.log" 2>&1
      continue ;;
  esac
  for run in ${only:-$RUNLIST}; do
    W=$RUNS/$run; seed=${run##*_s}
    case $stage in
      pretrain)
        if [ "${run%%_*}" = electra ]; then
          keys="$ELECTRA --config.train.num_steps=$STEPS"
        else
          keys="--config.train.num_steps=$(bert_steps)"
        fi
        # shellcheck disable=SC2086
        timed "pretrain_$run" $KJAX train --config $C --workdir "$W" $keys \
            --config.train.seed="$seed" > "$RUNS/$run.train.log" 2>&1 ;;
      nli)
        timed "nli_$run" $KJAX finetune --task pair --train "$DATA/klue-nli-v1.1_dev.json" \
            --config "$W/kjax_config.py" --init "$W" --out "$RUNS/ft/nli_$run" \
            --config.finetune.split='(0.8,0.2)' --config.finetune.max_examples="$NLI_MAX" \
            --config.finetune.epochs="$NLI_EPOCHS" --config.finetune.max_seq_len=64 \
            --config.finetune.learning_rate=0 --config.finetune.patience=0 \
            > "$RUNS/nli_$run.log" 2>&1 ;;
      ner)
        timed "ner_$run" $KJAX finetune --task ner --train "$DATA/klue-ner-v1.1_dev.tsv" \
            --config "$W/kjax_config.py" --init "$W" --out "$RUNS/ft/ner_$run" \
            --config.finetune.split='(0.8,0.2)' --config.finetune.max_examples="$NER_MAX" \
            --config.finetune.epochs="$NER_EPOCHS" --config.finetune.max_seq_len=64 \
            --config.finetune.learning_rate=0 --config.finetune.patience=0 \
            > "$RUNS/ner_$run.log" 2>&1 ;;
      nerall)
        timed "nerall_$run" $KJAX finetune --task ner --train "$DATA/klue-ner-v1.1_dev.tsv" \
            --config "$W/kjax_config.py" --init "$W" --out "$RUNS/ft/nerall_$run" \
            --config.finetune.split='(0.8,0.2)' --config.finetune.epochs="$NERALL_EPOCHS" \
            --config.finetune.max_seq_len=64 --config.finetune.learning_rate=0 \
            --config.finetune.patience=0 > "$RUNS/nerall_$run.log" 2>&1 ;;
      ftseeds)
        timed "ftseeds_$run" $KJAX finetune --task ner --train "$DATA/klue-ner-v1.1_dev.tsv" \
            --config "$W/kjax_config.py" --init "$W" --seeds "$FT_SEEDS" \
            --out "$RUNS/ft/nerall_ftseeds_$run" \
            --config.finetune.split='(0.8,0.2)' --config.finetune.epochs="$NERALL_EPOCHS" \
            --config.finetune.max_seq_len=64 --config.finetune.learning_rate=0 \
            --config.finetune.patience=0 > "$RUNS/ftseeds_$run.log" 2>&1 ;;
      *) echo "$0: unknown stage $stage (data pretrain nli ner nerall ftseeds control)" >&2
         exit 2 ;;
    esac
  done
done
$PY experiments/electra_vs_mlm_table.py "$RUNS" || true
