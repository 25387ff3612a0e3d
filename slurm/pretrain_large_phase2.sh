#!/usr/bin/env bash
# BERT-LARGE phase 2: resume phase 1's checkpoint (step PHASE1_STEPS, 900000) with 512-token
# sequences up to step 1M. It refuses to start (exit 2, nothing written) while the newest
# checkpoint in OUTPUT_DIR is before PHASE1_STEPS, so an early start cannot cut phase 1 short;
# slurm/pretrain_large_all.sh submits both phases with this one waiting for phase 1 (afterok).
#   cd /path/to/bert_ds && sbatch slurm/pretrain_large_phase2.sh [extra pretrain.py options]
# Settings: the environment variables of slurm/pretrain_large.sh (PHASE=2 is set here).
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
export PHASE=2
exec bash "${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}/slurm/pretrain_large.sh" "$@"
