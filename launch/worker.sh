#!/usr/bin/env bash
# The worker-side half of the launch scripts. It runs ON each TPU VM: setup.sh
# copies the repo to ~/kjax, and setup/run/stop/autorestart.sh call
#   bash ~/kjax/launch/worker.sh VERB ...
# over `gcloud ... ssh --command`, so that the remote command is one short
# line with the kjax arguments quoted exactly once.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: worker.sh [--dry-run] VERB ...      (runs on a TPU VM worker, not locally)
  setup [--python 3.11] [--extras tpu]   uv + a venv in ~/kjax-venv + pip install -e ~/kjax[EXTRAS]
  start RUN [--env K=V]... -- ARGS...     detached `kjax ARGS` (appends to ~/kjax-logs/RUN.log)
  run   RUN [--env K=V]... -- ARGS...     the same in the foreground, output tee'd to the log
  status RUN                              prints running | exit=CODE | exit=stopped | none
  stop                                    stops jobs started here, frees the TPU

start/run first stop the previous job and free the TPU (kill whatever holds
/dev/accel* or /dev/vfio/*, remove /tmp/libtpu_lockfile): a crashed or killed
run otherwise leaves the TPU "in use" for the next one.
Options:
  --dry-run   print the commands instead of running them
  -h, --help  this help
Environment: KJAX_DIR (~/kjax), KJAX_VENV (~/kjax-venv), KJAX_LOGS (~/kjax-logs).
EOF
}

KJAX_DIR=${KJAX_DIR:-$HOME/kjax}
VENV=${KJAX_VENV:-$HOME/kjax-venv}
LOGS=${KJAX_LOGS:-$HOME/kjax-logs}
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/${BASH_SOURCE[0]##*/}"
STOP_WAIT=${KJAX_STOP_WAIT:-30} # seconds between SIGTERM and SIGKILL

setup() {
  local py=3.11 extras=tpu tmp="${TMPDIR:-/tmp}/uv-install-$$.sh"
  while (($#)); do
    split_eq "$@"; set -- "${SPLIT[@]}"
    case $1 in
      --python) need "$@"; py=$2; shift 2 ;;
      --extras) need "$@"; extras=$2; shift 2 ;;
      *) common_flag "$@"; shift "$SHIFTN" ;;
    esac
  done
  export PATH="$HOME/.local/bin:$PATH" # where the uv installer puts uv
  if ! command -v uv >/dev/null; then
    x curl -LsSf https://astral.sh/uv/install.sh -o "$tmp"
    x sh "$tmp"
    x rm -f "$tmp"
  fi
  # Keep an existing venv (re-setup is then quick) unless its Python differs.
  if [[ -x $VENV/bin/python ]] &&
    [[ $("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') != "$py" ]]; then
    x rm -rf "$VENV"
  fi
  if [[ ! -x $VENV/bin/python ]]; then x uv venv --python "$py" "$VENV"; fi
  x cd "$KJAX_DIR"
  x uv pip install --python "$VENV/bin/python" -e ".[$extras]"
  x "$VENV/bin/python" -c 'import kjax'
  say "# kjax ready on $(hostname) in $VENV"
}

# alive SID: a process of session SID still runs (zombies, which a slow init
# may leave around for a while, do not count).
alive() {
  local st
  st=$(ps -o stat= -s "$1" 2>/dev/null) || return 1
  grep -q '^ *[^Z ]' <<<"$st"
}

# Kill the process groups of jobs started by `start` (each is a session of its
# own, see start()); TERM first so a job can finish writing a checkpoint.
stop_jobs() {
  local mark=$1 f pid i
  for f in "$LOGS"/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid"; then
      x kill -TERM -- "-$pid"
      if ! ((DRY_RUN)); then
        for ((i = 0; i < STOP_WAIT * 5; i++)); do
          alive "$pid" || break
          sleep 0.2
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
        if ((mark)); then printf 'stopped\n' >"${f%.pid}.exit"; fi
      fi
    fi
    if ! ((DRY_RUN)); then rm -f "$f"; fi
  done
}

# Free the TPU: anything else still holding the devices, and the lock file a
# killed libtpu leaves behind.
clear_tpu() {
  local devs=() d
  for d in /dev/accel* /dev/vfio/*; do
    if [[ -e $d ]]; then devs+=("$d"); fi
  done
  if ((${#devs[@]})); then
    quote_words "${devs[@]}"
    say "+ sudo lsof -t $REPLY | xargs -r sudo kill -9"
    if ! ((DRY_RUN)); then sudo lsof -t "${devs[@]}" 2>/dev/null | xargs -r sudo kill -9 || true; fi
  fi
  x sudo rm -f /tmp/libtpu_lockfile
}

# parse_job ARGS: RUN [--env K=V]... -- KJAX_ARGS; sets RUN, ENVS, ARGS.
parse_job() {
  [[ $# -ge 1 ]] || die "missing RUN name"
  RUN=$1
  check_run_name "$RUN"
  shift
  ENVS=(PYTHONUNBUFFERED=1) # logs appear as they are written
  while (($#)); do
    split_eq "$@"; set -- "${SPLIT[@]}"
    case $1 in
      --env) need "$@"
        [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$2': expected NAME=VALUE"
        ENVS+=("$2"); shift 2 ;;
      --) shift; break ;;
      *) common_flag "$@"; shift "$SHIFTN" ;;
    esac
  done
  [[ $# -ge 1 ]] || die "missing the kjax command after -- (e.g. -- train --config ...)"
  ARGS=("$@")
  [[ -d $KJAX_DIR && -x $VENV/bin/kjax ]] ||
    die "no $KJAX_DIR or $VENV/bin/kjax on $(hostname): run launch/setup.sh first"
}

prepare_job() {
  stop_jobs 0
  clear_tpu
  x mkdir -p "$LOGS"
  x rm -f "$LOGS/$RUN.exit"
  x ln -sfn "$RUN.log" "$LOGS/latest.log"
}

start() {
  parse_job "$@"
  prepare_job
  # setsid -f: the job gets a session (and process group) of its own, so it
  # survives the ssh session and stop_jobs can kill it with all its children.
  show setsid -f env "${ENVS[@]}" bash "$SELF" _job "$RUN" "${ARGS[@]}"
  if ((DRY_RUN)); then return 0; fi
  setsid -f env "${ENVS[@]}" bash "$SELF" _job "$RUN" "${ARGS[@]}" </dev/null >/dev/null 2>&1
  # Wait until it is running (or already over) so `status` never races it.
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -e $LOGS/$RUN.pid || -e $LOGS/$RUN.exit ]] && break
    sleep 0.1
  done
  say "# started $RUN on $(hostname): $LOGS/$RUN.log"
}

# The detached job itself: record pid and exit code around `kjax ARGS`.
job() {
  RUN=$1
  shift
  printf '%s\n' "$$" >"$LOGS/$RUN.pid"
  quote_words "$@"
  # Append: a restart under the same RUN keeps the earlier attempts' output.
  printf '# %s %s: kjax %s\n' "$(date -u +%FT%TZ)" "$(hostname)" "$REPLY" >>"$LOGS/$RUN.log"
  local rc=0
  cd "$KJAX_DIR"
  "$VENV/bin/kjax" "$@" >>"$LOGS/$RUN.log" 2>&1 || rc=$?
  printf '%s\n' "$rc" >"$LOGS/$RUN.exit"
  rm -f "$LOGS/$RUN.pid"
  return "$rc"
}

run_fg() {
  parse_job "$@"
  prepare_job
  quote_words env "${ENVS[@]}" "$VENV/bin/kjax" "${ARGS[@]}"
  say "+ $REPLY 2>&1 | tee -a $LOGS/$RUN.log"
  if ((DRY_RUN)); then return 0; fi
  local rc=0
  cd "$KJAX_DIR"
  env "${ENVS[@]}" "$VENV/bin/kjax" "${ARGS[@]}" 2>&1 | tee -a "$LOGS/$RUN.log" || rc=${PIPESTATUS[0]}
  printf '%s\n' "$rc" >"$LOGS/$RUN.exit"
  return "$rc"
}

status() {
  [[ $# -eq 1 ]] || die "usage: status RUN"
  check_run_name "$1"
  local pid
  if [[ -s $LOGS/$1.exit ]]; then
    printf 'exit=%s\n' "$(head -n 1 "$LOGS/$1.exit")"
  elif pid=$(cat "$LOGS/$1.pid" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] && alive "$pid"; then
    echo running
  else
    echo none
  fi
}

main() {
  while (($#)); do
    case $1 in
      setup | start | run | status | stop | _job) break ;;
      *) common_flag "$@"; shift "$SHIFTN" ;;
    esac
  done
  [[ $# -ge 1 ]] || die "missing VERB (setup, start, run, status, stop; see --help)"
  local verb=$1
  shift
  case $verb in
    setup) setup "$@" ;;
    start) start "$@" ;;
    run) run_fg "$@" ;;
    status) status "$@" ;;
    stop)
      while (($#)); do common_flag "$@"; shift "$SHIFTN"; done
      stop_jobs 1
      clear_tpu ;;
    _job) job "$@" ;;
  esac
}

main "$@"
