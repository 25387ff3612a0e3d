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
