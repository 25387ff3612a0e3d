#!/usr/bin/env bash
# BERT-LARGE pre-training on N GPU nodes: the paper's recipe, one 1M-step schedule in two phases.
#   cd /path/to/bert_ds && bash slurm/pretrain_large_all.sh       both phases, phase 2 after phase 1
#   cd /path/to/bert_ds && sbatch slurm/pretrain_large.sh         phase 1 only: 128 tokens, steps 0-900k
#   DRY_RUN=1 bash slurm/pretrain_large.sh                        the launch plan for the #SBATCH layout
# Edit the #SBATCH lines for your cluster; everything below reads environment variables with defaults,
# so `TP=2 OUTPUT_DIR=... sbatch --nodes=8 slurm/pretrain_large.sh` needs no edit. Before srun the
# script checks its launch plan (one process, seconds): a setting that cannot run fails here with
# one `error:` line. Submit again (or let Slurm requeue the job): it resumes from the latest
# complete checkpoint in OUTPUT_DIR.
#   PHASE          1 (default: SEQ_LENGTH 128, stops at PHASE1_STEPS) or 2 (512 tokens to TRAIN_STEPS;
#                  refuses to start unless phase 1's checkpoint at PHASE1_STEPS is there)
#   PHASE1_STEPS   where phase 1 ends: 900000, 90% of TRAIN_STEPS (1000000) as in the paper
#   PRESET TP PP   model size (large) and tensor/pipeline-parallel sizes (1, 1); DP = tasks / (TP x PP)
#   DS_CONFIG      ds_configs/ name or JSON path (default: zero1, or pipeline when PP > 1)
#   PRECISION      auto (default: bf16 on GPUs with bf16, fp16 on older ones), bf16, fp16 or fp32
#   GLOBAL_BATCH   sequences per step (256); MICRO_BATCH per GPU (auto: the largest that fits the
#                  per-GPU batch up to 64 sequences at 128 tokens, 16 at 512)
#   DATA           sources [NAME=]LOCATION[@WEIGHT][#LAYOUT], space separated (default: the folders that
#                  slurm/prepare_data.sh makes, DATA_DIR/bookcorpus and DATA_DIR/wikipedia, each weighted
#                  by its manifest's word count as the paper mixed them). Nodes with internet may name
#                  the hub directly: DATA="hf:bookcorpus/bookcorpus@refs/convert/parquet@800
#                  hf:wikimedia/wikipedia:20231101.en@2500" (each shard fetches ~1/K of the Parquet files)
#   DATA_DIR       default $REPO/data/prepared
#   EVAL_INTERVAL  evaluate on held-out text every N steps (default: no evaluation); EVAL_DATA the
#                  held-out sources (DATA's syntax; required unless DATA=sample), EVAL_SAMPLES (1000)
#   TARGET_MLM_ACCURACY  stop with a checkpoint at this held-out masked-LM accuracy (MLPerf: 0.72)
#   KEEP_BEST=1    keep the best evaluated checkpoint apart from KEEP_LAST (OUTPUT_DIR/best.json)
#   TOKENIZER      default: bert-base-uncased (built in; Google's vocabulary); --lowercase as extra argument
#   OUTPUT_DIR     checkpoints, metrics.jsonl, tensorboard/, logs/ (default $REPO/runs/bert-large)
#   STEP_TIMEOUT   seconds a rank may make no progress before its watchdog writes its stacks to
#                  OUTPUT_DIR/hang/ and ends the run (auto: 10x the median step, at least 300 s; 0 off);
#                  the job is then requeued, at most HANG_REQUEUES times (3), and resumes
#   COLLECTIVE_TIMEOUT  seconds a collective waits for a peer (600)
#   NUM_WORKERS    data-loader processes per GPU (auto: 2, or when resuming the count that keeps the
#                  checkpoint's data shards, so the stream continues exactly; each takes a core)
#   SAVE_INTERVAL KEEP_LAST LOG_INTERVAL TRAIN_STEPS STOP_AT_STEP SEQ_LENGTH PYTHON
#   PLAN_AHEAD=1   (with DRY_RUN=1) phase 2's plan as if phase 1 had finished, without looking for
#                  its checkpoint: what pretrain_large_all.sh checks at submission
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
# shellcheck source=SCRIPTDIR/_common.sh
source "$REPO/slurm/_common.sh"
PHASE="${PHASE:-1}"
PHASE1_STEPS="${PHASE1_STEPS:-900000}"
case "$PHASE" in
  1) SEQ_LENGTH="${SEQ_LENGTH:-128}" STOP_AT_STEP="${STOP_AT_STEP-$PHASE1_STEPS}" ;;
  2) SEQ_LENGTH="${SEQ_LENGTH:-512}" STOP_AT_STEP="${STOP_AT_STEP-}" ;;
  *) echo "error: PHASE must be 1 or 2, got '$PHASE'" >&2; exit 2 ;;
esac
OUTPUT_DIR="${OUTPUT_DIR:-$REPO/runs/bert-large}"
PRESET="${PRESET:-large}"
TP="${TP:-1}"
PP="${PP:-1}"
DS_CONFIG="${DS_CONFIG:-}"
PRECISION="${PRECISION:-auto}"
TRAIN_STEPS="${TRAIN_STEPS:-1000000}"
GLOBAL_BATCH="${GLOBAL_BATCH:-256}"
MICRO_BATCH="${MICRO_BATCH:-auto}"
NUM_WORKERS="${NUM_WORKERS:-auto}"
STEP_TIMEOUT="${STEP_TIMEOUT:-auto}"
COLLECTIVE_TIMEOUT="${COLLECTIVE_TIMEOUT:-600}"
SAVE_INTERVAL="${SAVE_INTERVAL:-2000}"
KEEP_LAST="${KEEP_LAST:-3}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
DATA_DIR="${DATA_DIR:-$REPO/data/prepared}"
if [ -z "${DATA:-}" ]; then
  # The prepared corpora; a missing one is made by slurm/prepare_data.sh (compute nodes often have no internet).
  for corpus in "bookcorpus hf:bookcorpus/bookcorpus@refs/convert/parquet" "wikipedia hf:wikimedia/wikipedia:20231101.en"; do
    read -r name hub <<< "$corpus"
    if [ ! -f "$DATA_DIR/$name/manifest.json" ]; then
      echo "error: $DATA_DIR/$name is not prepared; on a node with internet run: DATA_DIR=$DATA_DIR CORPORA=$name sbatch slurm/prepare_data.sh (it runs: python -m bert_ds.data.prepare $hub --output $DATA_DIR/$name), or set DATA" >&2
      exit 2
    fi
  done
  DATA="books=$DATA_DIR/bookcorpus@words wiki=$DATA_DIR/wikipedia@words"
fi
TOKENIZER="${TOKENIZER:-}"

read -r -a data_sources <<< "$DATA"
options=(
  --preset "$PRESET" --tensor-parallel "$TP" --pipeline-parallel "$PP" --precision "$PRECISION"
  --seq-length "$SEQ_LENGTH" --train-steps "$TRAIN_STEPS" --global-batch-size "$GLOBAL_BATCH"
  --micro-batch-size "$MICRO_BATCH" --num-workers "$NUM_WORKERS" --data "${data_sources[@]}"
  --step-timeout "$STEP_TIMEOUT" --collective-timeout "$COLLECTIVE_TIMEOUT"
  --save "$OUTPUT_DIR" --save-interval "$SAVE_INTERVAL" --keep-last "$KEEP_LAST"
  --log-interval "$LOG_INTERVAL" --metrics-file "$OUTPUT_DIR/metrics.jsonl" --tensorboard-dir "$OUTPUT_DIR/tensorboard"
)
if [ -n "$DS_CONFIG" ]; then options+=(--deepspeed-config "$DS_CONFIG"); fi
if [ -n "$TOKENIZER" ]; then options+=(--tokenizer "$TOKENIZER"); fi
if [ -n "$STOP_AT_STEP" ]; then options+=(--stop-at-step "$STOP_AT_STEP"); fi
if [ -n "${EVAL_INTERVAL:-}" ]; then
  options+=(--eval-interval "$EVAL_INTERVAL")
  if [ -n "${EVAL_DATA:-}" ]; then read -r -a eval_sources <<< "$EVAL_DATA"; options+=(--eval-data "${eval_sources[@]}"); fi
  if [ -n "${EVAL_SAMPLES:-}" ]; then options+=(--eval-samples "$EVAL_SAMPLES"); fi
  if [ -n "${TARGET_MLM_ACCURACY:-}" ]; then options+=(--target-mlm-accuracy "$TARGET_MLM_ACCURACY"); fi
  if [ "${KEEP_BEST:-0}" = 1 ]; then options+=(--keep-best); fi
fi
resume=(--auto-resume)
if [ "$PHASE" = 2 ]; then resume+=(--phase-start-step "$PHASE1_STEPS"); fi
if [ "${PLAN_AHEAD:-0}" = 1 ]; then
  if [ "${DRY_RUN:-0}" != 1 ]; then echo "error: PLAN_AHEAD=1 only goes with DRY_RUN=1" >&2; exit 2; fi
  if [ "$PHASE" = 2 ]; then resume+=(--plan-from-step "$PHASE1_STEPS"); fi
fi

echo "bert_ds: phase $PHASE of $PRESET pre-training, job ${SLURM_JOB_ID:-(none: plan only)}, output $OUTPUT_DIR"
check_plan "$0" bert_ds/pretrain.py "${options[@]}" "${resume[@]}" "$@"
rendezvous

echo "bert_ds: $SLURM_JOB_NUM_NODES node(s), $SLURM_NTASKS tasks, master $MASTER_ADDR:$MASTER_PORT"
# One process per GPU on every node.
status=0
run_ranks "$OUTPUT_DIR" "$PYTHON" "$REPO/bert_ds/pretrain.py" "${options[@]}" "${resume[@]}" "$@" || status=$?
if [ "$status" -eq 99 ]; then
  # SIGUSR1 before the time limit: the run saved a checkpoint; come back and resume from it.
  echo "bert_ds: checkpoint saved before the time limit; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
if [ "$status" -ne 0 ]; then
  requeue_after_hang "$OUTPUT_DIR"
fi
exit "$status"
