# shellcheck shell=bash
# Helpers sourced by every launch/*.sh: flag parsing, validation, TPU types
# and the run-or-print wrapper behind --dry-run.
#
# Kept to bash 3.2 (macOS's stock bash runs these too): no associative arrays,
# no ${x,,}, no mapfile, and maybe-empty arrays expand as ${a[@]+"${a[@]}"}
# (bash < 4.4 treats "${a[@]}" of an empty array as unset under set -u).
#
# Variables set here are read by the sourcing script, hence:
# shellcheck disable=SC2034

PROG=${0##*/}
LAUNCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "$LAUNCH_DIR")

# Where things live on every TPU worker (setup.sh puts them there).
# shellcheck disable=SC2088 # ~ is meant for the remote shell to expand
REMOTE_WORKER='~/kjax/launch/worker.sh'

# Common flags; defaults from the environment.
NAME=${KJAX_TPU_NAME:-}
ZONE=${KJAX_ZONE:-}
PROJECT=${KJAX_PROJECT:-}
ACCELERATOR=${KJAX_ACCELERATOR:-}
DRY_RUN=0
SHIFTN=1
SCOPE=()

die() {
  printf '%s: %s\n' "$PROG" "$*" >&2
  exit 2
}

# Narration: stdout in --dry-run (it is the output), stderr when live (so
# command substitutions only capture what gcloud prints).
say() {
  if ((DRY_RUN)); then printf '%s\n' "$*"; else printf '%s\n' "$*" >&2; fi
}

# quote ARG: shell-quote into REPLY, like Python's shlex.quote (single quotes,
# so the output survives copy-paste and shlex.split alike).
quote() {
  local q="'\\''"
  if [[ -n $1 && $1 != *[!A-Za-z0-9_@%+=:,./-]* ]]; then
    REPLY=$1
  else
    REPLY="'${1//\'/$q}'"
  fi
}

# quote_words ARGS...: the quoted words joined by spaces, into REPLY.
quote_words() {
  local out='' a
  for a in "$@"; do
    quote "$a"
    out+=" $REPLY"
  done
  REPLY=${out# }
}

# show ARGS...: print a command as one copy-pasteable line prefixed by '+ '.
# --flag=VALUE is written --flag='VALUE' so long --command strings stay legible.
show() {
  local out='+' a
  for a in "$@"; do
    if [[ $a =~ ^(--[a-z][a-z0-9-]*=)(.*)$ ]]; then
      quote "${BASH_REMATCH[2]}"
      out+=" ${BASH_REMATCH[1]}$REPLY"
    else
      quote "$a"
      out+=" $REPLY"
    fi
  done
  say "$out"
}

# x ARGS...: run a command, or only print it under --dry-run.
x() {
  show "$@"
  if ((DRY_RUN)); then return 0; fi
  "$@"
}

# need FLAG [VALUE]: the flag must have a non-empty value that is not a flag.
need() {
  if [[ $# -lt 2 || -z $2 || $2 == --* ]]; then die "$1 needs a value"; fi
}

# common_flag ARGS...: parse one common flag, set SHIFTN; dies on anything
# unknown. Scripts call it from the default branch of their own case.
common_flag() {
  case $1 in
    --name) need "$@"; NAME=$2; SHIFTN=2 ;;
    --zone) need "$@"; ZONE=$2; SHIFTN=2 ;;
    --project) need "$@"; PROJECT=$2; SHIFTN=2 ;;
    --dry-run) DRY_RUN=1; SHIFTN=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown flag $1 (see $PROG --help)" ;;
    *) die "unexpected argument '$1' (see $PROG --help)" ;;
  esac
}

# split_eq "$@": turns a leading --flag=value into --flag value. Scripts do
#   split_eq "$@"; set -- "${SPLIT[@]}"
# at the top of their parse loop so both spellings work.
split_eq() {
  if [[ $1 =~ ^(--[a-z][a-z0-9-]*)=(.*)$ ]]; then
    SPLIT=("${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${@:2}")
  else
    SPLIT=("$@")
  fi
}

# require_target: validate --name/--zone/--project and build SCOPE, the
# location flags every gcloud call gets.
require_target() {
  [[ -n $NAME ]] || die "--name is required (or set KJAX_TPU_NAME)"
  [[ $NAME =~ ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
    die "--name '$NAME': use lowercase letters, digits and hyphens, starting with a letter"
  [[ -n $ZONE ]] || die "--zone is required (or set KJAX_ZONE), e.g. europe-west4-a"
  [[ $ZONE =~ ^[a-z]+-[a-z]+[0-9]+-[a-z]$ ]] ||
    die "--zone '$ZONE' is not a zone name like europe-west4-a"
  SCOPE=(--zone="$ZONE")
  if [[ -n $PROJECT ]]; then
    [[ $PROJECT =~ ^[a-z][-a-z0-9.:]*[a-z0-9]$ ]] || die "--project '$PROJECT' is not a project id"
    SCOPE+=(--project="$PROJECT")
  fi
}

# parse_accelerator TYPE: sets TPU_FAMILY, TPU_HOSTS (VMs in the slice) and
# TPU_VERSION (default runtime image) for an accelerator type like v3-32.
parse_accelerator() {
  local a=$1 n
  [[ -n $a ]] || die "--accelerator is required (or set KJAX_ACCELERATOR), e.g. v3-32"
  [[ $a =~ ^([a-z0-9]+)-([0-9]+)$ ]] ||
    die "--accelerator '$a': expected FAMILY-SIZE, e.g. v3-32"
  TPU_FAMILY=${BASH_REMATCH[1]}
  n=$((10#${BASH_REMATCH[2]}))
  case $TPU_FAMILY in
    v2 | v3 | v4 | v5p)
      # The size counts TensorCores; every host has 8 of them.
      ((n > 0 && n % 8 == 0)) || die "--accelerator '$a': $TPU_FAMILY sizes are multiples of 8"
      TPU_HOSTS=$((n / 8)) ;;
    v5litepod | v6e)
      # The size counts chips: up to 8 on one host, 4 per host beyond that.
      case $n in
        1 | 4 | 8) TPU_HOSTS=1 ;;
        *) ((n % 16 == 0)) || die "--accelerator '$a': $TPU_FAMILY sizes are 1, 4, 8 or multiples of 16"
          TPU_HOSTS=$((n / 4)) ;;
      esac ;;
    *) die "--accelerator '$a': unknown TPU family '$TPU_FAMILY' (known: v2 v3 v4 v5p v5litepod v6e)" ;;
  esac
  # Runtime images; the Ubuntu 22.04 base images have Python 3.10, which is
  # why setup.sh brings its own Python with uv.
  case $TPU_FAMILY in
    v2 | v3 | v4) TPU_VERSION=tpu-ubuntu2204-base ;;
    v5p) TPU_VERSION=v2-alpha-tpuv5 ;;
    v5litepod) TPU_VERSION=v2-alpha-tpuv5-lite ;;
    v6e) TPU_VERSION=v2-alpha-tpuv6e ;;
  esac
}

# check_run_name NAME: run names become file names on the workers.
check_run_name() {
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] ||
    die "--run '$1': use letters, digits, '.', '_' and '-'"
}
