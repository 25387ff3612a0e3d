#!/usr/bin/env bash
# Fine-tune BERT on SWAG (bert_ds/finetune/swag.py) on one node: BERT-LARGE fits one GPU per rank,
# so the 8 GPUs run data parallel.
#   cd /path/to/bert_ds && INIT=/path/to/checkpoint sbatch slurm/finetune_swag.sh [extra swag.py options]
# Edit the #SBATCH lines for your cluster; everything else is an environment variable with a default
# (the shared ones are listed in slurm/_finetune_common.sh):
#   DATA_DIR    folder with the official train.csv and val.csv (default $REPO/swagaf/data)
#   DATASET     or a hub id, e.g. allenai/swag
#   OUTPUT_DIR  default $REPO/runs/swag
#   BATCH_SIZE  default 16, the paper's (with lr 2e-5 and 3 epochs, the entrypoint's defaults)
# GRID=1 runs 18 settings: raise --time. A resubmitted or requeued job (after a hang) starts over.
#SBATCH --job-name=bert-swag
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=12:00:00
#SBATCH --partition=gpu
#SBATCH --output=slurm-%x-%j.out
#SBATCH --requeue
set -euo pipefail

REPO="${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
DATA_DIR="${DATA_DIR-$REPO/swagaf/data}"
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/swag}"
BATCH_SIZE="${BATCH_SIZE:-16}"
# shellcheck source=SCRIPTDIR/_finetune_common.sh
source "$REPO/slurm/_finetune_common.sh"
finetune bert_ds/finetune/swag.py "$@"
