#!/usr/bin/env bash
# The GPU suite (benchmarks/gpu/suite.py) on a CUDA machine that cannot reach a
# package registry: kjax's missing pure-Python wheels and the HF Flax peer's
# come along in .whl/ (made by `bash benchmarks/gpu/suite.sh --fetch` on a
# machine with network), are installed with --no-deps --target into /tmp, and
# the parts run within their budget. benchmarks/gpu/README.md explains it.
#
#   bash benchmarks/gpu/suite.sh --fetch      # with network: the wheels into .whl/
#   bash benchmarks/gpu/suite.sh --quick      # on the GPU machine: (a) + (c), ≤ 5 min
#   bash benchmarks/gpu/suite.sh              # the full set, ≤ 9 min
#   bash benchmarks/gpu/suite.sh --parts m    # modern_base's start → first step, ≤ 7 min
#   bash benchmarks/gpu/suite.sh --settle     # the attention questions, ≤ 9 min
#
# Results: $OUT/gpu_suite.md, the part logs, and the records in $OUT/results
# (merge them into benchmarks/results with `python benchmarks/report.py --merge
# $OUT/results`).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64)
if [[ "${1:-}" == "--fetch" ]]; then
  python3 -m pip download -q "${WHEELS[@]}" -d .whl/kjax \
    flax==0.12.8 ml_collections==1.1.0 optax==0.2.8
  # `kjax train` (part f) needs these too; installed only where the image lacks them
  python3 -m pip download -q "${WHEELS[@]}" -d .whl/train \
    grain==0.2.18 array_record==0.8.6 cloudpickle==3.1.3 portpicker==1.6.0 \
    tensorboardX==2.6.5 protobuf==6.33.6
  python3 -m pip download -q "${WHEELS[@]}" -d .whl/peer \
    transformers==4.57.6 huggingface_hub==0.36.2 tokenizers==0.22.2
  ls .whl/kjax .whl/train .whl/peer
  exit 0
fi
OUT=${OUT:-runs/gpu_suite}
SITE=/tmp/kjax_site
PEER=/tmp/kjax_peer
mkdir -p "$OUT"
if compgen -G ".whl/kjax/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/kjax/*.whl
fi
# wheel file name → import name; a module the image already has is left alone
# (its version is what the image's other packages were built against)
declare -A MODULE=([grain]=grain [array_record]=array_record [cloudpickle]=cloudpickle
                   [portpicker]=portpicker [tensorboardx]=tensorboardX [protobuf]=google.protobuf)
for wheel in .whl/train/*.whl; do
  [[ -e "$wheel" ]] || continue
  name=$(basename "$wheel"); name=${name%%-*}
  if ! PYTHONPATH="$SITE" python3 -c "import ${MODULE[$name]:-$name}" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target "$SITE" "$wheel"
    echo "installed $name (missing from the image)"
  fi
done
PEER_ARGS=()
if compgen -G ".whl/peer/*.whl" >/dev/null; then
  # transformers 4.57 (the last with Flax) shadows the image's 5.x in the peer's
  # process only: its bin/python puts the peer folder first.
  python3 -m pip install -q --no-index --no-deps --target "$PEER/site" .whl/peer/*.whl
  mkdir -p "$PEER/bin"
  printf '#!/bin/sh\nPYTHONPATH=%s:%s exec python3 "$@"\n' "$PEER/site" "$SITE" >"$PEER/bin/python"
  chmod +x "$PEER/bin/python"
  PEER_ARGS=(--peer-venv "$PEER")
fi
export PYTHONPATH="$SITE:$PWD" XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_PLATFORMS=${JAX_PLATFORMS:-cuda}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# suite.py keeps its own budget (290 s --quick, 540 s full and --settle, 420 s
# for m); this is the backstop for a run that must end within 10 minutes
timeout 575 python3 benchmarks/gpu/suite.py --out "$OUT" --results "$OUT/results" \
  "${PEER_ARGS[@]}" "$@"
