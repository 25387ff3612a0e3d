#!/usr/bin/env bash
# Both phases of BERT-LARGE pre-training in one command, from the login node (not a batch script):
#   cd /path/to/bert_ds && NODES=8 TP=2 bash slurm/pretrain_large_all.sh [sbatch options]
# 1. Checks both launch plans here (DRY_RUN: one process each, seconds, no GPU); a setting that
#    cannot run stops here, before anything waits in the queue.
# 2. Submits phase 1 (slurm/pretrain_large.sh) and phase 2 (slurm/pretrain_large_phase2.sh) with
#    --dependency=afterok:<phase 1>: phase 2 starts only once phase 1 completed with exit 0, which
#    it does when it reaches PHASE1_STEPS (its time-limit requeues keep the dependency waiting);
#    if phase 1 fails or is cancelled, --kill-on-invalid-dep removes phase 2 from the queue.
# Settings: the environment variables of slurm/pretrain_large.sh, plus NODES and TASKS_PER_NODE
# (default: the #SBATCH lines); other arguments go to both sbatch calls.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export BERT_DS_HOME="${BERT_DS_HOME:-$(dirname "$here")}"
layout=()
if [ -n "${NODES:-}" ]; then layout+=("--nodes=$NODES"); fi
if [ -n "${TASKS_PER_NODE:-}" ]; then layout+=("--ntasks-per-node=$TASKS_PER_NODE" "--gpus-per-node=$TASKS_PER_NODE"); fi

echo "== phase 1 plan"
DRY_RUN=1 PHASE=1 bash "$here/pretrain_large.sh"
echo "== phase 2 plan (resume checks wait for phase 1)"
DRY_RUN=1 PHASE=2 PLAN_AHEAD=1 bash "$here/pretrain_large.sh"

first="$(sbatch --parsable "${layout[@]}" "$@" "$here/pretrain_large.sh")"
first="${first%%;*}"
second="$(sbatch --parsable "${layout[@]}" --dependency="afterok:$first" --kill-on-invalid-dep=yes "$@" \
  "$here/pretrain_large_phase2.sh")"
echo "bert_ds: phase 1 is job $first; phase 2 is job ${second%%;*}, waiting for phase 1 to complete"
