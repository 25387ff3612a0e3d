#!/usr/bin/env bash
# Fine-tune BERT on SQuAD v1.1 or v2.0 (bert_ds/finetune/squad.py) on one node: BERT-LARGE fits one
# GPU per rank, so the 8 GPUs run data parallel.
#   cd /path/to/bert_ds && INIT=/path/to/checkpoint sbatch slurm/finetune_squad.sh [extra squad.py options]
# Edit the #SBATCH lines for your cluster; everything else is an environment variable with a default
# (the shared ones are listed in slurm/_finetune_common.sh):
#   VERSION     1.1 (default) or 2.0
#   DATA_DIR    folder with the official train-v$VERSION.json and dev-v$VERSION.json (default $REPO/squad_data)
#   DATASET     or a hub id, e.g. rajpurkar/squad (v1.1) or rajpurkar/squad_v2 (v2.0)
#   OUTPUT_DIR  default $REPO/runs/squad-v$VERSION
#   LR, EPOCHS, BATCH_SIZE  default to the paper's: lr 5e-5; v1.1 3 epochs at batch 32, v2.0 2 epochs at 48
# GRID=1 runs 18 settings: raise --time. A resubmitted or requeued job (after a hang) starts over.
#SBATCH --job-name=bert-squad
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
VERSION="${VERSION:-1.1}"
DATA_DIR="${DATA_DIR-$REPO/squad_data}"
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/squad-v$VERSION}"
LR="${LR:-5e-5}"
if [ "$VERSION" = 2.0 ]; then EPOCHS="${EPOCHS:-2}" BATCH_SIZE="${BATCH_SIZE:-48}"; fi
# shellcheck source=SCRIPTDIR/_finetune_common.sh
source "$REPO/slurm/_finetune_common.sh"
finetune bert_ds/finetune/squad.py --version "$VERSION" "$@"
