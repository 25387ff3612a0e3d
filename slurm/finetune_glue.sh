#!/usr/bin/env bash
# Fine-tune BERT on GLUE (bert_ds/finetune/glue.py) on one node: BERT-LARGE fits one GPU per rank,
# so the 8 GPUs run data parallel.
#   cd /path/to/bert_ds && INIT=/path/to/checkpoint sbatch slurm/finetune_glue.sh [extra glue.py options]
# Edit the #SBATCH lines for your cluster; everything else is an environment variable with a default
# (the shared ones are listed in slurm/_finetune_common.sh):
#   TASK        a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or all (default): all
#               runs the nine tasks one after another into OUTPUT_DIR/<task>/ and writes the GLUE
#               average (without WNLI) to OUTPUT_DIR/results.json. With GRID=1 (18 settings per task)
#               submit one job per task instead: for t in cola sst2 ...; do TASK=$t GRID=1 sbatch ...; done
#   DATA_DIR    glue_data folder as GLUE's download script writes it (default $REPO/glue_data)
#   DATASET     or a hub id, e.g. nyu-mll/glue
#   OUTPUT_DIR  default $REPO/runs/glue-$TASK
# The default is the paper's recipe for BERT-LARGE (Table 1, §4.1): batch 32, 3 epochs, the lr of
# {5e-5, 4e-5, 3e-5, 2e-5} best on dev (GRID=1 over GRID_LRS x GRID_BATCH_SIZES x GRID_EPOCHS), and
# SMALL_TASK_RESTARTS=5 random restarts on the small tasks CoLA, STS-B, MRPC and RTE (RESTARTS=1 on
# the others), the best dev run kept; results.json says how many runs the selection used.
#   GRID_LRS=5e-5,3e-5,2e-5 GRID_BATCH_SIZES=16,32 GRID_EPOCHS=2,3,4   the appendix A.3 grid instead
#   GRID=0 LR=2e-5                                                      one setting, no selection
# TASK=all runs 9 tasks x 4 settings (x 5 restarts on 4 of them: 100 runs): on a slow node submit
# one job per task (for t in cola sst2 mrpc stsb qqp mnli qnli rte wnli; do TASK=$t sbatch ...; done).
# Fine-tuning keeps no resumable state: a resubmitted or requeued job (after a hang: STEP_TIMEOUT in
# slurm/_finetune_common.sh) starts over, and its results replace the earlier ones.
#SBATCH --job-name=bert-glue
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=72:00:00
#SBATCH --partition=gpu
#SBATCH --output=slurm-%x-%j.out
#SBATCH --requeue
set -euo pipefail

REPO="${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
TASK="${TASK:-all}"
DATA_DIR="${DATA_DIR-$REPO/glue_data}"
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/glue-$TASK}"
GRID="${GRID:-1}"
selection=(--small-task-restarts "${SMALL_TASK_RESTARTS:-5}")
if [ "$GRID" = 1 ]; then
  selection+=(--grid-lrs "${GRID_LRS:-5e-5,4e-5,3e-5,2e-5}" --grid-batch-sizes "${GRID_BATCH_SIZES:-32}"
              --grid-epochs "${GRID_EPOCHS:-3}")
fi
# shellcheck source=SCRIPTDIR/_finetune_common.sh
source "$REPO/slurm/_finetune_common.sh"
finetune bert_ds/finetune/glue.py --task "$TASK" "${selection[@]}" "$@"
