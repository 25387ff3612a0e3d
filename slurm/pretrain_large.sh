#!/usr/bin/env bash
# BERT-LARGE pre-training, phase 1 of the paper's recipe (128 tokens, 90% of 1M steps), on N GPU nodes.
#   cd /path/to/bert_ds && sbatch slurm/pretrain_large.sh [extra pretrain.py options]
# Edit the #SBATCH lines for your cluster; everything below reads environment variables with defaults,
# so `NODES=... TP=2 OUTPUT_DIR=... sbatch slurm/pretrain_large.sh` needs no edit. Submit again (or let
# Slurm requeue the job): it resumes from the latest complete checkpoint in OUTPUT_DIR.
#SBATCH --job-name=bert-large
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

REPO="${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/bert-large}"
PRESET="${PRESET:-large}"
TP="${TP:-1}"
PP="${PP:-1}"
DS_CONFIG="${DS_CONFIG:-zero1}"
SEQ_LENGTH="${SEQ_LENGTH:-128}"
TRAIN_STEPS="${TRAIN_STEPS:-1000000}"
STOP_AT_STEP="${STOP_AT_STEP-900000}"   # phase 1 ends here; phase 2 (512 tokens) runs to TRAIN_STEPS
GLOBAL_BATCH="${GLOBAL_BATCH:-256}"
MICRO_BATCH="${MICRO_BATCH:-16}"
SAVE_INTERVAL="${SAVE_INTERVAL:-2000}"
KEEP_LAST="${KEEP_LAST:-3}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
# Sources: [NAME=]LOCATION[@WEIGHT], space separated; the paper's 800M : 2,500M words by default.
DATA="${DATA:-books=/data/bookcorpus/*.txt@800 hf:wikimedia/wikipedia:20231101.en@2500}"
TOKENIZER="${TOKENIZER:-}"

# Rendezvous: the job's first node; a port derived from the job id (bert_ds.launcher does the same).
MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}"
MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 40000))}"
export MASTER_ADDR MASTER_PORT
mkdir -p "$OUTPUT_DIR/logs"

read -r -a data_sources <<< "$DATA"
options=(
  --preset "$PRESET" --tensor-parallel "$TP" --pipeline-parallel "$PP" --deepspeed-config "$DS_CONFIG"
  --seq-length "$SEQ_LENGTH" --train-steps "$TRAIN_STEPS" --global-batch-size "$GLOBAL_BATCH"
  --micro-batch-size "$MICRO_BATCH" --data "${data_sources[@]}"
  --save "$OUTPUT_DIR" --auto-resume --save-interval "$SAVE_INTERVAL" --keep-last "$KEEP_LAST"
  --log-interval "$LOG_INTERVAL" --metrics-file "$OUTPUT_DIR/metrics.jsonl" --tensorboard-dir "$OUTPUT_DIR/tensorboard"
)
if [ -n "$TOKENIZER" ]; then options+=(--tokenizer "$TOKENIZER"); fi
if [ -n "$STOP_AT_STEP" ]; then options+=(--stop-at-step "$STOP_AT_STEP"); fi

echo "bert_ds: job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s), $SLURM_NTASKS tasks, master $MASTER_ADDR:$MASTER_PORT, output $OUTPUT_DIR"
# One process per GPU; srun starts them on every node (no ssh/pdsh), bert_ds reads SLURM_PROCID etc.
# Each task's output goes to OUTPUT_DIR/logs/<job>-<task>.log.
set +e
srun --kill-on-bad-exit=1 --output "$OUTPUT_DIR/logs/%j-%t.log" \
  "$PYTHON" "$REPO/bert_ds/pretrain.py" "${options[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 99 ]; then
  # SIGUSR1 before the time limit: the run saved a checkpoint; come back and resume from it.
  echo "bert_ds: checkpoint saved before the time limit; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
exit "$status"
