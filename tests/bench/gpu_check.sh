#!/usr/bin/env bash
# The one prepared GPU check: on a single NVIDIA GPU, the training-throughput benchmark for
# BERT-LARGE at 128 and 512 tokens in bf16, printing tokens/s and MFU against the card's bf16
# matrix-multiply rate measured in the same run (tests/bench/train_throughput.py), next to
# Hugging Face's BertForPreTraining under bf16 autocast.
#
# Usage: bash tests/bench/gpu_check.sh [OUT_DIR]     (PYTHON=... picks the interpreter)
# Writes OUT_DIR/gpu.txt, OUT_DIR/large_<seq>.json and .txt. Takes a few minutes on an H100/H200.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${1:-${OUT:-gpu_check_out}}"
python="${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}"
mkdir -p "$out"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch sees no CUDA device')"

for seq in 128 512; do
    # Batches that keep the card busy without activation recomputation (LARGE, bf16, 80+ GB).
    if [[ "$seq" == 128 ]]; then batch=64; else batch=16; fi
    "$python" tests/bench/train_throughput.py --presets large --seq-length "$seq" --batch "$batch" \
        --precision bf16 --steps 5 --warmup 3 --repeats 3 --json "$out/large_${seq}.json" \
        | tee "$out/large_${seq}.txt"
done
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)" | tee -a "$out/gpu.txt"
