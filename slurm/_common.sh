# shellcheck shell=bash
# Sourced by every batch script in slurm/ (not a batch script itself): the launch-plan check that
# runs before srun, and the rendezvous. The caller sets REPO and PYTHON.
#   DRY_RUN=1     print the launch plan and exit 0 (2 with the reason when the run could not
#                 start), without srun; works inside a job and on a login node, where the world
#                 is NODES x TASKS_PER_NODE (default: the script's own #SBATCH lines)
#   PLAN_DEVICE   the device kind the plan is for: auto (this host's; default), gpu or cpu
# The entrypoints import the package `bert_ds`: `make install` installs the checkout into .venv
# (editable); for another interpreter (PYTHON=...), the checkout goes on PYTHONPATH here.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# sbatch_default SCRIPT OPTION: the value of `#SBATCH --OPTION=VALUE` in SCRIPT.
sbatch_default() {
  sed -n "s/^#SBATCH --$2=//p" "$1" | head -n 1
}

# planned_world_size SCRIPT: the job's task count (SLURM_NTASKS); outside a job, NODES x
# TASKS_PER_NODE with SCRIPT's #SBATCH defaults.
planned_world_size() {
  if [ -n "${SLURM_NTASKS:-}" ]; then
    echo "$SLURM_NTASKS"
    return
  fi
  local nodes="${NODES:-$(sbatch_default "$1" nodes)}" tasks="${TASKS_PER_NODE:-$(sbatch_default "$1" ntasks-per-node)}"
  echo $((nodes * tasks))
}

# check_plan SCRIPT ENTRYPOINT OPTION...: the entrypoint's dry run, one process on this host
# (seconds, no GPU used). A plan that fails ends the script with its exit code, before srun and
# before anything is written; with DRY_RUN=1 the script ends after the plan either way.
check_plan() {
  local script="$1" entrypoint="$2" status=0
  shift 2
  # On failure the entrypoint's own `error:` line is the last word: nothing was started.
  "$PYTHON" "$REPO/$entrypoint" --dry-run "${PLAN_DEVICE:-auto}" --world-size "$(planned_world_size "$script")" "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    exit "$status"
  fi
  if [ "${DRY_RUN:-0}" = 1 ]; then
    exit 0
  fi
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "error: not inside a Slurm job: submit with sbatch (DRY_RUN=1 only prints the plan)" >&2
    exit 2
  fi
}

# rendezvous: the job's first node and a port derived from the job id (bert_ds.runtime.launcher does the same).
rendezvous() {
  MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}"
  MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 40000))}"
  export MASTER_ADDR MASTER_PORT
}

# requeue_after_hang OUTPUT_DIR [WHAT]: when a rank's watchdog ended this run (exit 98; its report
# OUTPUT_DIR/hang/rank-R.txt carries the line "job $SLURM_JOB_ID run $SLURM_RESTART_COUNT"),
# print each report's one-line cause and requeue the job, which then does WHAT (default: resume
# from the latest complete checkpoint); at most HANG_REQUEUES times (default 3), so that a hang
# that comes back every time (a data file that never reads) ends the job instead of looping.
# srun's own status is not enough: when one rank exits 98 it kills the others, whose signals then
# set the status.
hang_reports() {
  grep -lx "job $SLURM_JOB_ID run ${SLURM_RESTART_COUNT:-0}" "$1"/hang/rank-*.txt 2>/dev/null || true
}

# wait_for_srun PID OUTPUT_DIR: srun's exit status. Once a rank has reported a hang, srun gets
# HANG_GRACE seconds (30) to end, then this returns 98 without it: after a network partition
# srun may never hear that the tasks on the far side ended, and would hold the job forever.
wait_for_srun() {
  local since=""
  while kill -0 "$1" 2>/dev/null; do
    if [ -z "$since" ] && [ -n "$(hang_reports "$2")" ]; then since=$SECONDS; fi
    if [ -n "$since" ] && [ $((SECONDS - since)) -ge "${HANG_GRACE:-30}" ]; then
      echo "bert_ds: srun did not end ${HANG_GRACE:-30} s after a rank reported a hang; going on without it"
      return 98
    fi
    sleep 2
  done
  wait "$1"
}

# run_ranks OUTPUT_DIR COMMAND...: COMMAND on every task of the job (srun; bert_ds reads
# SLURM_PROCID etc.; no ssh/pdsh), each task's output in OUTPUT_DIR/logs/<job>-<task>.log, and its
# status as wait_for_srun sees it. srun runs in the background: after a network partition it may
# never hear that the far side's tasks ended, so the wait stops HANG_GRACE s after a hang report.
run_ranks() {
  local output_dir="$1"
  shift
  mkdir -p "$output_dir/logs" || return  # (set -e does not reach inside a function called with ||)
  srun --kill-on-bad-exit=1 --output "$output_dir/logs/%j-%t.log" "$@" &
  wait_for_srun "$!" "$output_dir"
}

requeue_after_hang() {
  local reports report
  reports=$(hang_reports "$1")
  if [ -z "$reports" ]; then
    return 0
  fi
  for report in $reports; do
    echo "bert_ds: $(basename "$report"): $(head -n 1 "$report")"
  done
  if [ "${SLURM_RESTART_COUNT:-0}" -ge "${HANG_REQUEUES:-3}" ]; then
    echo "error: the job hung again after ${SLURM_RESTART_COUNT:-0} requeue(s) (HANG_REQUEUES=${HANG_REQUEUES:-3}); not requeueing: read the stacks in $1/hang/" >&2
    return 0
  fi
  echo "bert_ds: a rank's watchdog ended the run; requeueing job $SLURM_JOB_ID (restart $((${SLURM_RESTART_COUNT:-0} + 1)) of at most ${HANG_REQUEUES:-3}) to ${2:-resume from the latest complete checkpoint}"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
}
