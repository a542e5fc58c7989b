#!/usr/bin/env bash
# Delete a TPU VM or a queued resource (and with it its TPU VM).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF_USAGE'
Usage: delete.sh --name NAME --zone ZONE [--queued] [--yes] [--dry-run]
Delete the TPU. Its disks and ~/kjax-logs go with it; checkpoints in gs:// stay.

  --name NAME         TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE         e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT   GCP project           (default $KJAX_PROJECT, else gcloud's)
  --queued            NAME is a queued resource (create.sh --queued); deletes its
                      TPU VM too (--force)
  --yes, -y           do not ask for confirmation (gcloud --quiet)
  --dry-run           print the command instead of running it
  -h, --help          this help

Example:
  launch/delete.sh --name pod --zone europe-west4-a
EOF_USAGE
}

QUEUED=${KJAX_QUEUED:-0} YES=()
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --queued) QUEUED=1; shift ;;
    --yes | -y) YES=(--quiet); shift ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target

if [[ $QUEUED == 1 ]]; then
  x gcloud compute tpus queued-resources delete "$NAME" "${SCOPE[@]}" --force ${YES[@]+"${YES[@]}"}
else
  x gcloud compute tpus tpu-vm delete "$NAME" "${SCOPE[@]}" ${YES[@]+"${YES[@]}"}
fi
