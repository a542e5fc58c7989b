#!/usr/bin/env bash
# Keep a kjax training alive on spot/preemptible capacity: poll the TPU; when
# it is preempted or gone, delete + recreate + set up + re-run the same command.
# `kjax train` resumes from the latest checkpoint in its gs:// workdir, so a
# re-run continues where the preempted one last saved.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: autorestart.sh --name NAME --zone ZONE --accelerator TYPE [options] -- train ARGS...
Supervise a training: every --poll seconds read the TPU state and the job's
status on worker 0, and
  READY/ACTIVE, job running        wait
  READY/ACTIVE, no job yet         set up (first time) and start it (run.sh)
  READY/ACTIVE, job failed         start it again
  READY/ACTIVE, job finished (0)   exit 0 (after deleting the TPU with --delete-when-done)
  PREEMPTED/TERMINATED/SUSPENDED/FAILED/missing
                                   delete, recreate (create.sh), set up, start again
  anything else (CREATING, WAITING_FOR_RESOURCES, ...)   wait
Give up after --max-restarts recreations/restarts. Stop it with Ctrl-C; stop.sh
marks the job stopped, which ends the loop too.

  --name NAME           TPU name              (default $KJAX_TPU_NAME)
  --zone ZONE           e.g. europe-west4-a   (default $KJAX_ZONE)
  --project PROJECT     GCP project           (default $KJAX_PROJECT, else gcloud's)
  --accelerator TYPE    e.g. v3-32, for recreating (default $KJAX_ACCELERATOR)
  --version VERSION     runtime image (default: by family, see create.sh --help)
  --spot | --preemptible | --reserved    capacity for recreating (see create.sh)
  --queued              the TPU is a queued resource (create.sh --queued)
  --run RUN             run name (default train-YYYYmmdd-HHMMSS); pass the --run of a
                        job run.sh already started to adopt it
  --env NAME=VALUE      environment variable for kjax (repeatable)
  --poll SECONDS        time between polls (default 300)
  --max-restarts N      give up after N recreations/restarts (default 20)
  --delete-when-done    delete the TPU once the training exits 0
  --simulate-state S    with --dry-run: pretend the TPU is in state S (e.g. PREEMPTED,
                        MISSING, READY) and print what one poll would run
  --dry-run             print the commands of one poll instead of running them
  -h, --help            this help

Example:
  launch/autorestart.sh --name pod --zone europe-west4-a --accelerator v3-32 --spot -- \
      train --config tpu_configs/v3_32.py --workdir gs://BUCKET/run1
EOF
}

QUEUED=${KJAX_QUEUED:-0} RUN=train-$(date +%Y%m%d-%H%M%S)
POLL=300 MAX_RESTARTS=20 DELETE_WHEN_DONE=0 SIMULATE=''
CREATE_ARGS=() RUN_ARGS=()
while (($#)); do
  split_eq "$@"; set -- "${SPLIT[@]}"
  case $1 in
    --accelerator) need "$@"; ACCELERATOR=$2; shift 2 ;;
    --version) need "$@"; CREATE_ARGS+=(--version "$2"); shift 2 ;;
    --spot | --preemptible | --reserved) CREATE_ARGS+=("$1"); shift ;;
    --queued) QUEUED=1; shift ;;
    --run) need "$@"; RUN=$2; shift 2 ;;
    --env) need "$@"
      [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$2': expected NAME=VALUE"
      RUN_ARGS+=(--env "$2"); shift 2 ;;
    --poll) need "$@"; POLL=$2; shift 2 ;;
    --max-restarts) need "$@"; MAX_RESTARTS=$2; shift 2 ;;
    --delete-when-done) DELETE_WHEN_DONE=1; shift ;;
    --simulate-state) need "$@"; SIMULATE=$2; shift 2 ;;
    --) shift; break ;;
    *) common_flag "$@"; shift "$SHIFTN" ;;
  esac
done
require_target
parse_accelerator "$ACCELERATOR"
check_run_name "$RUN"
[[ $POLL =~ ^[0-9]+$ ]] || die "--poll '$POLL': expected seconds"
[[ $MAX_RESTARTS =~ ^[0-9]+$ ]] || die "--max-restarts '$MAX_RESTARTS': expected a number"
[[ -z $SIMULATE ]] || ((DRY_RUN)) || die "--simulate-state only goes with --dry-run"
[[ -z $SIMULATE || $SIMULATE =~ ^[A-Z_]+$ ]] ||
  die "--simulate-state '$SIMULATE': expected a state like PREEMPTED"
[[ $# -ge 1 ]] || die "missing the kjax command after -- (e.g. -- train --config ... --workdir gs://...)"
[[ $1 == train ]] || die "autorestart re-runs 'kjax train'; got '$1' after --"
# A recreated TPU has fresh disks: the checkpoints must be in GCS to resume.
prev=''
for a in "$@"; do
  wd=''
  if [[ $prev == --workdir ]]; then wd=$a; elif [[ $a == --workdir=* ]]; then wd=${a#--workdir=}; fi
  [[ -z $wd || $wd == gs://* ]] ||
    die "--workdir '$wd' must be a gs:// path: a preempted TPU loses its disks"
  prev=$a
done
TRAIN=("$@")

# Flags every sibling script gets.
COMMON=(--name "$NAME" --zone "$ZONE")
if [[ -n $PROJECT ]]; then COMMON+=(--project "$PROJECT"); fi
if ((DRY_RUN)); then COMMON+=(--dry-run); fi
DELETE_ARGS=()
if [[ $QUEUED == 1 ]]; then CREATE_ARGS+=(--queued) DELETE_ARGS+=(--queued); fi
sibling() {
  local script=$1
  shift
  "$LAUNCH_DIR/$script" "${COMMON[@]}" "$@"
}

log() {
  if ((DRY_RUN)); then say "# $*"; else say "# $(date -u +%FT%TZ) $*"; fi
}

# tpu_state: STATE = the TPU's (or queued resource's) state, MISSING or UNKNOWN.
tpu_state() {
  local cmd err out
  if [[ $QUEUED == 1 ]]; then
    cmd=(gcloud compute tpus queued-resources describe "$NAME" "${SCOPE[@]}" --format='value(state.state)')
  else
    cmd=(gcloud compute tpus tpu-vm describe "$NAME" "${SCOPE[@]}" --format='value(state)')
  fi
  show "${cmd[@]}"
  if ((DRY_RUN)); then
    STATE=${SIMULATE:-READY}
    log "simulated state: $STATE"
    return 0
  fi
  err=$(mktemp)
  if out=$("${cmd[@]}" 2>"$err"); then
    STATE=${out:-UNKNOWN}
  elif grep -q NOT_FOUND "$err"; then
    STATE=MISSING
  else
    STATE=UNKNOWN
    log "describe failed: $(tail -n 1 "$err")"
  fi
  rm -f "$err"
}

# job_status: JOB = running, none, exit=CODE or exit=stopped (worker.sh
# status on worker 0), or unknown when the worker cannot be reached.
job_status() {
  local cmd=(gcloud compute tpus tpu-vm ssh "$NAME" "${SCOPE[@]}" --worker=0
    --command="bash $REMOTE_WORKER status $RUN")
  show "${cmd[@]}"
  if ((DRY_RUN)); then
    JOB=none
    log "simulated job status: $JOB"
    return 0
  fi
  JOB=$("${cmd[@]}" 2>/dev/null | tail -n 1) || JOB=unknown
  JOB=${JOB//[$'\r\t ']/}
}

RESTARTS=0
spend() { # one more recreation/restart, or give up
  RESTARTS=$((RESTARTS + 1))
  if ((RESTARTS > MAX_RESTARTS)); then
    log "giving up: more than --max-restarts $MAX_RESTARTS restarts"
    exit 1
  fi
}

CHECK_ARGS=(--accelerator "$ACCELERATOR") # the first launch compiles for it (run.sh)
NEED_SETUP=1 # the first launch, and the first one on every new TPU, sets up
launch() {
  if ((NEED_SETUP)); then
    sibling setup.sh || return 1
    NEED_SETUP=0
  fi
  sibling run.sh --run "$RUN" "${CHECK_ARGS[@]}" ${RUN_ARGS[@]+"${RUN_ARGS[@]}"} -- "${TRAIN[@]}" ||
    return 1
  CHECK_ARGS=(--no-compile-check) # run.sh compiled this config once: not again per restart
}

recreate() {
  spend
  if [[ $STATE != MISSING ]]; then
    sibling delete.sh --yes ${DELETE_ARGS[@]+"${DELETE_ARGS[@]}"} || log "delete failed; creating anyway"
  fi
  NEED_SETUP=1
  sibling create.sh --accelerator "$ACCELERATOR" ${CREATE_ARGS[@]+"${CREATE_ARGS[@]}"}
}

POLLS=0
while :; do
  POLLS=$((POLLS + 1))
  tpu_state
  log "poll $POLLS: $NAME is $STATE"
  case $STATE in
    READY | ACTIVE)
      job_status
      case $JOB in
        running) log "$RUN is running" ;;
        exit=0)
          log "$RUN finished"
          if ((DELETE_WHEN_DONE)); then sibling delete.sh --yes ${DELETE_ARGS[@]+"${DELETE_ARGS[@]}"}; fi
          exit 0 ;;
        exit=stopped) log "$RUN was stopped (stop.sh); not restarting it"; exit 0 ;;
        exit=*)
          log "$RUN failed (${JOB}); starting it again"
          spend
          launch || log "start failed; retrying at the next poll" ;;
        none) launch || { spend; log "start failed; retrying at the next poll"; } ;;
        *) log "cannot read the job status on worker 0 ($JOB); retrying at the next poll" ;;
      esac ;;
    PREEMPTED | TERMINATED | SUSPENDED | FAILED | MISSING)
      if recreate; then
        # A TPU VM is READY when create returns; a queued resource must first
        # become ACTIVE, which the next polls wait for.
        if [[ $QUEUED != 1 ]] || ((DRY_RUN)); then
          if [[ $QUEUED == 1 ]]; then log "(live, this waits for ACTIVE first)"; fi
          launch || log "start failed; retrying at the next poll"
        fi
      else
        log "create failed (no capacity?); retrying at the next poll"
      fi ;;
    STOPPED | STOPPING) die "$NAME is $STATE (stop.sh --vm?): start or delete it first" ;;
    *) log "waiting" ;;
  esac
  if ((DRY_RUN)); then exit 0; fi # one poll is all --dry-run shows
  sleep "$POLL"
done
