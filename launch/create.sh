#!/usr/bin/env bash
# Create a TPU VM (slice), directly or as a queued resource.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: create.sh --name NAME --zone ZONE --accelerator TYPE [options] [-- GCLOUD_FLAGS...]
Create a Cloud TPU VM, e.g. a v3-32 pod slice (4 hosts).

  --name NAME           TPU name                 (default $KJAX_TPU_NAME)
  --zone ZONE           e.g. europe-west4-a      (default $KJAX_ZONE)
  --project PROJECT     GCP project              (default $KJAX_PROJECT, else gcloud's)
  --accelerator TYPE    v2-8, v3-8, v3-32, v4-8, v5litepod-16, v5p-8, v6e-8, ...
                                                 (default $KJAX_ACCELERATOR)
  --version VERSION     runtime image; default by family: v2/v3/v4 tpu-ubuntu2204-base,
                        v5p v2-alpha-tpuv5, v5litepod v2-alpha-tpuv5-lite, v6e v2-alpha-tpuv6e
  --spot                spot capacity (cheap, can be preempted at any time)
  --preemptible         legacy preemptible capacity (TPU VM only, at most 24 h)
  --reserved            your project's reservation
  --queued              create a queued resource (waits for capacity; its node has
                        the same NAME) instead of a TPU VM directly
  --dry-run             print the gcloud commands instead of running them
  -h, --help            this help
Arguments after -- are passed to gcloud as they are (e.g. --network=NET, --labels=k=v).

Example:
  launch/create.sh --name pod --zone europe-west4-a --accelerator v3-32 --spot
EOF
}

VERSION='' CAPACITY='' QUEUED=${KJAX_QUEUED:-0}
EXTRA=()
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --accelerator) need "$@"; ACCELERATOR=$2; shift 2 ;;
    --version) need "$@"; VERSION=$2; shift 2 ;;
    --spot | --preemptible | --reserved)
      [[ -z $CAPACITY || $CAPACITY == "$1" ]] ||
        die "$CAPACITY and $1 exclude each other (pick one of --spot, --preemptible, --reserved)"
      CAPACITY=$1; shift ;;
    --queued) QUEUED=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target
parse_accelerator "$ACCELERATOR"
VERSION=${VERSION:-$TPU_VERSION}
[[ $VERSION =~ ^[A-Za-z0-9._-]+$ ]] || die "--version '$VERSION' is not a runtime version name"

if [[ $QUEUED == 1 ]]; then
  [[ $CAPACITY != --preemptible ]] || die "--preemptible does not exist for --queued; use --spot"
  x gcloud compute tpus queued-resources create "$NAME" "${SCOPE[@]}" \
    --node-id="$NAME" --accelerator-type="$ACCELERATOR" --runtime-version="$VERSION" \
    ${CAPACITY:+"$CAPACITY"} ${EXTRA[@]+"${EXTRA[@]}"}
  say "# queued: $NAME becomes usable once 'gcloud compute tpus queued-resources describe" \
    "$NAME' says ACTIVE (then run setup.sh)"
else
  x gcloud compute tpus tpu-vm create "$NAME" "${SCOPE[@]}" \
    --accelerator-type="$ACCELERATOR" --version="$VERSION" \
    ${CAPACITY:+"$CAPACITY"} ${EXTRA[@]+"${EXTRA[@]}"}
fi
