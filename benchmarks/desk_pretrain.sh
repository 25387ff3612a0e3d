#!/usr/bin/env bash
# The desk recipe: pre-train the mini preset past the frequent-token phase on a 2-core CPU in about
# two hours, from prepared books + Wikipedia folders (python -m bert_ds.data.prepare), with
# Google's uncased WordPiece, then a short second phase at 256 tokens so that position embeddings
# past 128 are trained. Why each setting: docs/pretraining.md, "The desk recipe".
#
#   bash benchmarks/desk_pretrain.sh PREPARED_DIR OUT_DIR
#
# PREPARED_DIR holds the prepared folders books/, wiki/, books-held-out/, wiki-held-out/. Both
# phases resume where they stopped when run again (--auto-resume); a finished phase is skipped.
# Environment: OBJECTIVE (mlm_nsp; Table 5's rows use the same recipe with another objective),
# SEED (1234), PRECISION (auto), PHASE1_STEPS (7400), TRAIN_STEPS (8000), PYTHON; for tests only:
# PRESET (mini), GLOBAL_BATCH (128), EVAL_SAMPLES (2000), EVAL_INTERVAL (200), TOKENIZER.
set -euo pipefail
DATA="${1:?usage: desk_pretrain.sh PREPARED_DIR OUT_DIR}"
OUT="${2:?usage: desk_pretrain.sh PREPARED_DIR OUT_DIR}"
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
PHASE1_STEPS="${PHASE1_STEPS:-7400}"
TRAIN_STEPS="${TRAIN_STEPS:-8000}"
mkdir -p "$OUT"

common=(
  --preset "${PRESET:-mini}" --layer-norm-position pre --dropout 0 --tokenizer "${TOKENIZER:-bert-base-uncased}"
  --objective "${OBJECTIVE:-mlm_nsp}" --seed "${SEED:-1234}" --precision "${PRECISION:-auto}"
  --data "books=$DATA/books@words" "wiki=$DATA/wiki@words"
  --eval-data "books-held-out=$DATA/books-held-out@words" "wiki-held-out=$DATA/wiki-held-out@words"
  --eval-samples "${EVAL_SAMPLES:-2000}" --eval-interval "${EVAL_INTERVAL:-200}"
  --global-batch-size "${GLOBAL_BATCH:-128}" --micro-batch-size "${GLOBAL_BATCH:-128}"
  --lr 2e-3 --warmup-steps 300 --adam-beta2 0.98 --weight-decay 0.01 --clip-grad 1.0
  --train-steps "$TRAIN_STEPS" --save "$OUT" --save-interval 400 --keep-last 2 --log-interval 50
  --metrics-file "$OUT/metrics.jsonl"
)

step_of_latest() { [ -f "$OUT/latest" ] && sed 's/^step0*//' "$OUT/latest" || echo 0; }

if [ "$(step_of_latest)" -lt "$PHASE1_STEPS" ]; then
  echo "desk recipe, phase 1: 128 tokens to step $PHASE1_STEPS"
  "$PYTHON" bert_ds/pretrain.py "${common[@]}" --seq-length 128 --stop-at-step "$PHASE1_STEPS" --auto-resume
fi
if [ "$(step_of_latest)" -lt "$TRAIN_STEPS" ]; then
  echo "desk recipe, phase 2: 256 tokens, steps $PHASE1_STEPS to $TRAIN_STEPS"
  "$PYTHON" bert_ds/pretrain.py "${common[@]}" --seq-length 256 --phase-start-step "$PHASE1_STEPS" --auto-resume
fi
echo "desk recipe done: $OUT ($(step_of_latest) steps)"
