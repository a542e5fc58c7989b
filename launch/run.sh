#!/usr/bin/env bash
# Run a kjax command on every worker of a TPU VM (multi-host JAX needs the
# same program on all hosts; kjax calls jax.distributed.initialize() itself).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: run.sh --name NAME --zone ZONE [options] -- KJAX_ARGS...
Run `kjax KJAX_ARGS...` in ~/kjax on the workers. By default it is detached
(nohup-like: it survives the ssh session) and logs to ~/kjax-logs/RUN.log on
each worker (~/kjax-logs/latest.log points at the newest). Before starting,
the previous job is stopped and the TPU freed from stale users and locks.

  --name NAME         TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE         e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT   GCP project           (default $KJAX_PROJECT, else gcloud's)
  --run RUN           run name for the log files (default run-YYYYmmdd-HHMMSS)
  --worker W          all (default), an index (e.g. 0, for prepare), or a list 0,2 / 1-3
  --env NAME=VALUE    environment variable for kjax (repeatable)
  --foreground        stay attached and stream the output (still tee'd to the log)
  --dry-run           print the gcloud command instead of running it
  -h, --help          this help

Example:
  launch/run.sh --name pod --zone europe-west4-a -- \
      train --config tpu_configs/v3_32.py --workdir gs://BUCKET/run1
EOF
}

RUN=run-$(date +%Y%m%d-%H%M%S) WORKER=all VERB=start
ENVS=()
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --run) need "$@"; RUN=$2; shift 2 ;;
    --worker) need "$@"; WORKER=$2; shift 2 ;;
    --env) need "$@"
      [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$2': expected NAME=VALUE"
      ENVS+=(--env "$2"); shift 2 ;;
    --foreground) VERB=run; shift ;;
    --) shift; break ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target
check_run_name "$RUN"
[[ $WORKER =~ ^(all|[0-9]+([-,][0-9]+)*)$ ]] ||
  die "--worker '$WORKER': expected all, an index, or a list like 0,2 or 1-3"
[[ $# -ge 1 ]] ||
  die "missing the kjax command after -- (e.g. -- train --config tpu_configs/v3_32.py --workdir gs://...)"
[[ $1 != kjax ]] || die "give the kjax arguments after --, without 'kjax' (e.g. -- train ...)"

# The remote shell parses this line once: every user argument is quoted once.
quote_words ${ENVS[@]+"${ENVS[@]}"} -- "$@"
x gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker="$WORKER" \
  --command="bash $REMOTE_WORKER $VERB $RUN $REPLY"
if [[ $VERB == start ]] && ! ((DRY_RUN)); then
  say "# logs: launch/logs.sh --name $NAME --zone $ZONE${PROJECT:+ --project $PROJECT}" \
    "--run $RUN [--worker N] [--follow]"
fi
