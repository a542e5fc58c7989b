#!/usr/bin/env bash
# Stop the kjax job on every worker (and optionally the TPU VM itself).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF_USAGE'
Usage: stop.sh --name NAME --zone ZONE [--vm] [--dry-run]
Stop the jobs run.sh started, on every worker (SIGTERM, SIGKILL 30 s later),
and free the TPU. The run is marked stopped, so autorestart.sh (stop that
first anyway) does not start it again.

  --name NAME         TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE         e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT   GCP project           (default $KJAX_PROJECT, else gcloud's)
  --vm                then also stop the TPU VM (`gcloud ... tpu-vm stop`; it keeps
                      its disk and is not billed; single-host, non-spot TPUs only)
  --dry-run           print the commands instead of running them
  -h, --help          this help

Example:
  launch/stop.sh --name pod --zone europe-west4-a
EOF_USAGE
}

VM=0
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --vm) VM=1; shift ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target

x gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker=all \
  --command="bash $REMOTE_WORKER stop"
if ((VM)); then
  x gcloud compute tpus tpu-vm stop "$NAME" "${SCOPE[@]}"
fi
