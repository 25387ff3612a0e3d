#!/usr/bin/env bash
# BERT-LARGE phase 2: resume phase 1's checkpoint with 512-token sequences up to step 1M.
#   cd /path/to/bert_ds && sbatch slurm/pretrain_large_phase2.sh [extra pretrain.py options]
#SBATCH --job-name=bert-large-512
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=48:00:00
#SBATCH --partition=gpu
#SBATCH --requeue
#SBATCH --signal=USR1@300
#SBATCH --output=slurm-%x-%j.out
set -euo pipefail
export SEQ_LENGTH="${SEQ_LENGTH:-512}"
export STOP_AT_STEP="${STOP_AT_STEP:-}"   # run to TRAIN_STEPS
export MICRO_BATCH="${MICRO_BATCH:-4}"
exec bash "${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}/slurm/pretrain_large.sh" "$@"
