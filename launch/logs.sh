#!/usr/bin/env bash
# Show the tail of a run's log on a worker, or copy every worker's logs here.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: logs.sh --name NAME --zone ZONE [--run RUN] [--worker W] [--lines N] [--follow]
       logs.sh --name NAME --zone ZONE --fetch DIR [--worker W] [--accelerator TYPE]
Tail ~/kjax-logs/RUN.log on worker W, or with --fetch copy each worker's
~/kjax-logs/ to DIR/worker-I/kjax-logs/.

  --name NAME          TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE          e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT    GCP project           (default $KJAX_PROJECT, else gcloud's)
  --run RUN            which run (default latest, the newest run.sh started)
  --worker W           worker index or all (default 0 to tail, all to fetch); tail
                       also takes a list like 0,2 or 1-3
  --lines N            lines to show (default 100)
  --follow, -f         keep following the log (Ctrl-C to stop)
  --fetch DIR          copy the logs into DIR instead of tailing
  --accelerator TYPE   e.g. v3-32: how many workers to fetch from; without it the
                       count is read from the TPU (needed with --dry-run)
                                             (default $KJAX_ACCELERATOR)
  --dry-run            print the commands instead of running them
  -h, --help           this help

Example:
  launch/logs.sh --name pod --zone europe-west4-a --follow
  launch/logs.sh --name pod --zone europe-west4-a --fetch logs/ --accelerator v3-32
EOF
}

RUN=latest WORKER='' LINES=100 FOLLOW=0 FETCH=''
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --run) need "$@"; RUN=$2; shift 2 ;;
    --worker) need "$@"; WORKER=$2; shift 2 ;;
    --lines) need "$@"; LINES=$2; shift 2 ;;
    --follow | -f) FOLLOW=1; shift ;;
    --fetch) need "$@"; FETCH=$2; shift 2 ;;
    --accelerator) need "$@"; ACCELERATOR=$2; shift 2 ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target
check_run_name "$RUN"
[[ $LINES =~ ^[0-9]+$ ]] || die "--lines '$LINES': expected a number"
[[ -z $WORKER || $WORKER =~ ^(all|[0-9]+([-,][0-9]+)*)$ ]] ||
  die "--worker '$WORKER': expected all, an index, or a list like 0,2 or 1-3"

if [[ -z $FETCH ]]; then
  TAIL="tail -n $LINES"
  if ((FOLLOW)); then TAIL+=" -F"; fi
  x gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker="${WORKER:-0}" \
    --command="$TAIL ~/kjax-logs/$RUN.log"
  exit 0
fi

# scp copies from one worker at a time (from --worker=all every copy would land
# on the same local path), so count the workers.
WORKER=${WORKER:-all}
if [[ $WORKER == all ]]; then
  if [[ -z $ACCELERATOR ]]; then
    ((!DRY_RUN)) || die "--fetch with --worker all needs --accelerator under --dry-run (to count workers)"
    DESCRIBE=(gcloud compute tpus tpu-vm describe "$NAME" "${SCOPE[@]}" --format='value(acceleratorType)')
    show "${DESCRIBE[@]}"
    ACCELERATOR=$("${DESCRIBE[@]}")
  fi
  parse_accelerator "$ACCELERATOR"
  FIRST=0 LAST=$((TPU_HOSTS - 1))
else
  [[ $WORKER =~ ^[0-9]+$ ]] || die "--worker '$WORKER': --fetch takes all or one index"
  FIRST=$WORKER LAST=$WORKER
fi
for ((i = FIRST; i <= LAST; i++)); do
  x mkdir -p "$FETCH/worker-$i"
  x gcloud compute tpus tpu-vm scp --recurse "$NAME:kjax-logs" "$FETCH/worker-$i" \
    "${SCOPE[@]}" --worker="$i"
done
