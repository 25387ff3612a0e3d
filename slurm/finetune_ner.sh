#!/usr/bin/env bash
# Fine-tune BERT on CoNLL-2003 NER (bert_ds/finetune/ner.py) on one node: BERT-LARGE fits one GPU
# per rank, so the 8 GPUs run data parallel.
#   cd /path/to/bert_ds && INIT=/path/to/checkpoint sbatch slurm/finetune_ner.sh [extra ner.py options]
# Edit the #SBATCH lines for your cluster; everything else is an environment variable with a default
# (the shared ones are listed in slurm/_finetune_common.sh):
#   DATA_DIR    folder with CoNLL files: train.txt, valid.txt, test.txt (or eng.train, eng.testa,
#               eng.testb) (default $REPO/conll2003)
#   DATASET     or a hub id in the conll2003 schema (tokens, ner_tags), e.g. eriktks/conll2003
#   OUTPUT_DIR  default $REPO/runs/ner
#   RESTARTS    default 1; the selection over restarts and GRID=1's 18 settings is by dev entity F1
# GRID=1 runs 18 settings: raise --time. A resubmitted or requeued job (after a hang) starts over.
#SBATCH --job-name=bert-ner
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
DATA_DIR="${DATA_DIR-$REPO/conll2003}"
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/ner}"
# shellcheck source=SCRIPTDIR/_finetune_common.sh
source "$REPO/slurm/_finetune_common.sh"
finetune bert_ds/finetune/ner.py "$@"
