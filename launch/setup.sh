#!/usr/bin/env bash
# Copy this repo to every worker of a TPU VM and install kjax there in a
# Python >= 3.11 venv made with uv (the TPU images only have Python 3.10).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: setup.sh --name NAME --zone ZONE [options]
Copy the repo to ~/kjax on every worker (--worker=all) and install it with uv
into ~/kjax-venv. Safe to re-run (e.g. after changing code): the repo copy is
replaced, the venv is kept and updated.

  --name NAME         TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE         e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT   GCP project           (default $KJAX_PROJECT, else gcloud's)
  --python VERSION    Python for the venv   (default 3.11)
  --extras EXTRAS     pip extras of kjax    (default tpu, i.e. jax[tpu]; e.g. tpu,tfds)
  --dry-run           print the commands instead of running them
  -h, --help          this help

What is copied: the files git knows of plus untracked ones it does not ignore,
as they are in the working tree (uncommitted edits included; .venv/, runs/ no).

Example:
  launch/setup.sh --name pod --zone europe-west4-a
EOF
}

PY=3.11 EXTRAS=tpu
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --python) need "$@"; PY=$2; shift 2 ;;
    --extras) need "$@"; EXTRAS=$2; shift 2 ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target
[[ $PY =~ ^3\.[0-9]+$ ]] || die "--python '$PY': expected 3.MINOR, e.g. 3.11"
[[ ${PY#3.} -ge 11 ]] || die "--python '$PY': kjax needs Python >= 3.11"
[[ $EXTRAS =~ ^[a-z0-9_-]+(,[a-z0-9_-]+)*$ ]] || die "--extras '$EXTRAS': expected e.g. tpu or tpu,tfds"

TARBALL=kjax-src.tar.gz
LOCAL_TGZ="${TMPDIR:-/tmp}/kjax-src-$NAME.tar.gz"

# Pack the working tree: git's file list (tracked + untracked-not-ignored),
# minus tracked files deleted in the working tree.
say "# pack $REPO_ROOT (git ls-files --cached --others --exclude-standard) into $LOCAL_TGZ"
if ! ((DRY_RUN)); then
  git -C "$REPO_ROOT" rev-parse --git-dir >/dev/null 2>&1 || die "$REPO_ROOT is not a git checkout"
  git -C "$REPO_ROOT" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do
      if [[ -e $REPO_ROOT/$f ]]; then printf '%s\0' "$f"; fi
    done |
    COPYFILE_DISABLE=1 tar -C "$REPO_ROOT" -czf "$LOCAL_TGZ" --null -T - # (no macOS ._ files)
fi

x gcloud compute tpus tpu-vm scp "$LOCAL_TGZ" "$NAME:$TARBALL" "${SCOPE[@]}" --worker=all

quote_words --python "$PY" --extras "$EXTRAS"
REMOTE="rm -rf ~/kjax && mkdir -p ~/kjax && tar -xzf ~/$TARBALL -C ~/kjax && rm ~/$TARBALL"
REMOTE+=" && bash $REMOTE_WORKER setup $REPLY"
x gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker=all --command="$REMOTE"

if ! ((DRY_RUN)); then rm -f "$LOCAL_TGZ"; fi
