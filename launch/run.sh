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
  --accelerator TYPE  e.g. v3-32, for the compile check (default $KJAX_ACCELERATOR,
                      else gcloud's describe of the TPU)
  --no-compile-check  start `train --config C` without compiling it here first
                      (default: `kjax compile --config C --topology TYPE` runs on
                      this machine and a config that cannot fit stops here, not
                      after the queue; needs `pip install 'kjax[tpu]'`; also
                      KJAX_COMPILE_CHECK=0). A train without --config resumes
                      the recorded config: no check.
  --dry-run           print the gcloud command instead of running it
  -h, --help          this help

Example:
  launch/run.sh --name pod --zone europe-west4-a -- \
      train --config tpu_configs/v3_32.py --workdir gs://BUCKET/run1
EOF
}

RUN=run-$(date +%Y%m%d-%H%M%S) WORKER=all VERB=start
COMPILE_CHECK=${KJAX_COMPILE_CHECK:-1}
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
    --accelerator) need "$@"; ACCELERATOR=$2; shift 2 ;;
    --no-compile-check) COMPILE_CHECK=0; shift ;;
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

# compile_check KJAX_ARGS...: `kjax compile` here, for the slice's topology,
# of a new training run's config (its --config and --config.* overrides).
compile_check() {
  local config='' a
  local check=()
  [[ $1 == train ]] || return 0
  shift
  while (($#)); do
    case $1 in
      --config) config=${2:-}; check+=(--config "${2:-}"); shift $(($# > 1 ? 2 : 1)) ;;
      --config=*) config=${1#--config=}; check+=("$1"); shift ;;
      --config.*) check+=("$1"); shift ;;
      *) shift ;;
    esac
  done
  if [[ -z $config ]]; then
    say "# compile check skipped: train without --config resumes the run's recorded config"
    return 0
  fi
  if [[ -z $ACCELERATOR ]]; then
    ((!DRY_RUN)) || die "the compile check needs --accelerator under --dry-run (or --no-compile-check)"
    local describe=(gcloud compute tpus tpu-vm describe "$NAME" "${SCOPE[@]}" --format='value(acceleratorType)')
    show "${describe[@]}"
    ACCELERATOR=$("${describe[@]}") || die "could not read the accelerator type of $NAME; pass --accelerator"
  fi
  if ! ((DRY_RUN)) && ! command -v "${KJAX_LOCAL:-kjax}" >/dev/null; then
    die "the compile check runs kjax here: pip install 'kjax[tpu]' (or pass --no-compile-check)"
  fi
  (cd "$REPO_ROOT" && x env JAX_PLATFORMS=cpu "${KJAX_LOCAL:-kjax}" compile "${check[@]}" \
    --topology "$ACCELERATOR" --no-eval --no-roofline) ||
    die "$config does not compile for $ACCELERATOR (the kjax: error line above says what to change); nothing was started"
}
if ((COMPILE_CHECK)); then compile_check "$@"; fi

# The remote shell parses this line once: every user argument is quoted once.
quote_words ${ENVS[@]+"${ENVS[@]}"} -- "$@"
x gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker="$WORKER" \
  --command="bash $REMOTE_WORKER $VERB $RUN $REPLY"
if [[ $VERB == start ]] && ! ((DRY_RUN)); then
  say "# logs: launch/logs.sh --name $NAME --zone $ZONE${PROJECT:+ --project $PROJECT}" \
    "--run $RUN [--worker N] [--follow]"
fi
