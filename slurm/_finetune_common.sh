# shellcheck shell=bash
# Sourced by slurm/finetune_{glue,squad,swag,ner}.sh (not a batch script itself): the settings every
# fine-tuning job shares, read from environment variables with defaults, the launch-plan check
# (slurm/_common.sh: DRY_RUN=1 prints the plan and exits) and the srun launch.
#   INIT        bert_ds checkpoint (ZeRO or portable) or Hugging Face BERT folder
#               (default: $REPO/runs/bert-large, where slurm/pretrain_large.sh saves); none: random weights
#   DATA_DIR    local data folder in the official layout (the caller sets its default); set it empty
#               to give the data as extra arguments instead (e.g. squad.py --train-file F --dev-file F)
#   DATASET     hub dataset id instead of DATA_DIR (e.g. nyu-mll/glue); needs hub access from the nodes
#   OUTPUT_DIR  results.json, predictions, the selected model, logs/<job>-<task>.log (caller's default)
#   PRESET      model size when INIT=none (default large); with INIT the checkpoint decides
#   TP          tensor-parallel size (default 1: BERT-LARGE fine-tunes on one GPU per rank); PP must stay 1
#   DS_CONFIG   ds_configs/ name or JSON path (default zero1)
#   PRECISION   auto (default: bf16 on GPUs with bf16, fp16 on older ones), bf16, fp16 or fp32
#   GRID        1: a batch x lr x epochs grid, best on dev kept (default 0: one setting; the GLUE script: 1)
#   RESTARTS    runs per setting with seeds SEED, SEED+1, ... (default 1)
#   BATCH_SIZE, LR, EPOCHS, MAX_SEQ_LENGTH, SEED: empty keeps the entrypoint's defaults (the squad and
#               swag scripts default some of them to the paper's settings)
#   MICRO_BATCH per-GPU micro batch (default auto: the largest that fits the per-GPU batch up to the
#               model's ceiling, e.g. 64 sequences of 128 tokens for BERT-LARGE)
#   STEP_TIMEOUT  seconds a rank may make no progress before its watchdog writes its stacks to
#               OUTPUT_DIR/hang/ and ends the run (default auto; 0 off); the job is then requeued, at
#               most HANG_REQUEUES times (3), and runs again from the start (fine-tuning keeps no
#               resumable state). HANG_GRACE: seconds srun gets to end after a report (30).
#   PYTHON      interpreter (default: $REPO/.venv/bin/python)
#   DRY_RUN=1   print the launch plan and exit (see slurm/_common.sh); PLAN_DEVICE auto|gpu|cpu
# The caller sets REPO (the checkout: BERT_DS_HOME, else the submit folder), OUTPUT_DIR and DATA_DIR.

# finetune ENTRYPOINT [OPTION...]: `srun python ENTRYPOINT <common options> OPTION...`, one task per
# GPU; the caller passes its task options, then its own "$@" (extra options, which come last).
finetune() {
  local entrypoint="$1"
  shift
  local init="${INIT:-$REPO/runs/bert-large}"
  PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
  # shellcheck source=SCRIPTDIR/_common.sh
  source "$REPO/slurm/_common.sh"
  if [ "${PP:-1}" != 1 ]; then
    echo "error: fine-tuning runs without pipeline parallelism; PP must be 1, got '$PP'" >&2
    exit 2
  fi
  local options=(
    --output "$OUTPUT_DIR" --preset "${PRESET:-large}" --tensor-parallel "${TP:-1}"
    --deepspeed-config "${DS_CONFIG:-zero1}" --restarts "${RESTARTS:-1}" --micro-batch-size "${MICRO_BATCH:-auto}"
    --precision "${PRECISION:-auto}"
  )
  if [ "$init" != none ]; then options+=(--init "$init"); fi
  if [ -n "${DATASET:-}" ]; then
    options+=(--dataset "$DATASET")
  elif [ -n "$DATA_DIR" ]; then
    options+=(--data-dir "$DATA_DIR")
  fi
  if [ "${GRID:-0}" = 1 ]; then options+=(--grid); fi
  if [ -n "${BATCH_SIZE:-}" ]; then options+=(--batch-size "$BATCH_SIZE"); fi
  if [ -n "${LR:-}" ]; then options+=(--lr "$LR"); fi
  if [ -n "${EPOCHS:-}" ]; then options+=(--epochs "$EPOCHS"); fi
  if [ -n "${MAX_SEQ_LENGTH:-}" ]; then options+=(--max-seq-length "$MAX_SEQ_LENGTH"); fi
  if [ -n "${SEED:-}" ]; then options+=(--seed "$SEED"); fi
  if [ -n "${STEP_TIMEOUT:-}" ]; then options+=(--step-timeout "$STEP_TIMEOUT"); fi

  echo "bert_ds: $entrypoint from $init, job ${SLURM_JOB_ID:-(none: plan only)}, output $OUTPUT_DIR"
  check_plan "$0" "$entrypoint" "${options[@]}" "$@"
  rendezvous
  echo "bert_ds: $SLURM_NTASKS task(s), master $MASTER_ADDR:$MASTER_PORT"
  # One process per GPU. Task options and "$@" come after the common ones: later options win, so
  # extra arguments override.
  local status=0
  run_ranks "$OUTPUT_DIR" "$PYTHON" "$REPO/$entrypoint" "${options[@]}" "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    requeue_after_hang "$OUTPUT_DIR" "run again from the start (fine-tuning keeps no resumable state)"
  fi
  return "$status"
}
