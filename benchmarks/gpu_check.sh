#!/usr/bin/env bash
# The one prepared GPU check, a few minutes on one H100/H200:
#   pretrain   2 steps of BERT-BASE pre-training in bf16 through bert_ds/pretrain.py (sample
#              corpus), saving a ZeRO checkpoint;
#   glue       one fine-tuning step from that checkpoint on a tiny SST-2 folder written here;
#   cross_entropy
#              the output layer's cross-entropy against megatron-core's on the card
#              (benchmarks/vocab_cross_entropy.py): the same loss and gradient, time, peak memory;
#   large_128, large_512
#              the training-throughput benchmark for BERT-LARGE in bf16 at 128 and 512 tokens:
#              tokens/s and MFU against the card's bf16 matrix-multiply rate measured in the same
#              run (benchmarks/train_throughput.py), next to Hugging Face's BertForPreTraining.
# The short ones come first, so that a run cut off at its time limit still has them.
#
# On an offline node: if .whl/ holds wheels (benchmarks/gpu_wheels.sh fetches them where PyPI
# answers), they are installed first with `pip install --no-index --target $SITE` (default
# /tmp/site) and PYTHONPATH=$SITE:<repo> is used, the repository itself not installed; else
# .venv/bin/python runs everything as before. Either way an import check runs first and stops the
# script with one line if DeepSpeed, megatron-core, datasets or bert_ds does not import.
#
# Usage: bash benchmarks/gpu_check.sh [--install-only | --cpu] [OUT_DIR]
#   --install-only   install and run the import check, then stop (needs no GPU)
#   --cpu            the whole script's wiring on a CPU in about a minute (the test suite runs
#                    it): wheels, imports and every part, on the tiny preset in the precision
#                    `auto` picks, with no nvidia-smi; figures that mean nothing, failures that do
#   PYTHON=...       the interpreter (default python3 with .whl/, else .venv/bin/python)
#   WHEELS=...       the folder of wheels (default .whl/, which benchmarks/gpu_wheels.sh fills)
#   SITE=...         where the wheels go (default /tmp/site)
#   CHECK_TIMEOUT_S  each part's time limit (default 240)
# Writes OUT_DIR/gpu.txt (card, install, versions, summary), pretrain.txt, glue.txt,
# cross_entropy.txt/.json and large_<seq>.json/.txt: 9 files. Checkpoints and the GLUE folder go to a scratch folder that is
# removed at the end. A failed part does not stop the others; the last line says which passed,
# and the exit status is 1 if any failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."  # the repository root (this script lives in benchmarks/)
repo="$PWD"
install_only=0
gpu=1
while [[ "${1:-}" == --* ]]; do
    case "$1" in
        --install-only) install_only=1 ;;
        --cpu) gpu=0 ;;
        *) echo "usage: $0 [--install-only | --cpu] [OUT_DIR]" >&2; exit 2 ;;
    esac
    shift
done
out="${1:-${OUT:-gpu_check_out}}"
limit="${CHECK_TIMEOUT_S:-240}"
mkdir -p "$out"
: >"$out/gpu.txt"
export PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$out/gpu.txt"; }

shopt -s nullglob
wheels_dir="${WHEELS:-.whl}"
wheels=("$wheels_dir"/*.whl)
shopt -u nullglob
if ((${#wheels[@]})); then
    python="${PYTHON:-python3}"
    site="${SITE:-/tmp/site}"
    say "installing ${#wheels[@]} wheels from $wheels_dir/ into $site with $python"
    if ! "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "${wheels[@]}" 2>&1 | tee -a "$out/gpu.txt"; then
        say "gpu_check: FAILED: pip could not install $wheels_dir/ into $site (see $out/gpu.txt)"
        exit 1
    fi
    export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONNOUSERSITE=1
else
    python="${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}"
fi

# Import check: what the runs below need, where it was found, and the requirements of the carried
# packages that the node's own versions do not meet (printed, not fatal).
if ! "$python" - 2>&1 <<'EOF' | tee -a "$out/gpu.txt"; then
import importlib.metadata as md
import sys

import torch
import deepspeed
import megatron.core
import datasets
import punkt  # noqa: F401  (the default sentence splitter)
import bert_ds.pretrain  # noqa: F401

from packaging.requirements import Requirement

print(f"python {sys.version.split()[0]} at {sys.executable}")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) from {torch.__file__}")
for module, name in ((deepspeed, "deepspeed"), (megatron.core, "megatron-core"), (datasets, "datasets")):
    print(f"{name} {md.version(name)} from {module.__file__}")
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "missing"


print("also:", ", ".join(f"{n} {version(n)}" for n in (
    "pydantic", "numpy", "pyarrow", "pandas", "fsspec", "huggingface-hub", "packaging", "typing-extensions",
    "transformers", "tokenizers", "safetensors", "sentencepiece")))
for name in ("deepspeed", "megatron-core", "datasets", "pydantic", "pydantic-core", "multiprocess", "typing-inspection"):
    for line in md.requires(name) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"warning: {name} needs {req}: not installed")
            continue
        if not req.specifier.contains(have, prereleases=True):
            print(f"warning: {name} needs {req}: found {have}")
print("imports: ok")
EOF
    say "gpu_check: FAILED: the import check (deepspeed, megatron.core, datasets, bert_ds.pretrain) failed with $python (see $out/gpu.txt)"
    exit 1
fi
if ((install_only)); then
    exit 0
fi

if ((gpu)); then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$out/gpu.txt"
    "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch sees no CUDA device')" \
        2>&1 | tee -a "$out/gpu.txt"
fi

# What each part runs: the real sizes on a GPU; the tiny preset, the precision `auto` picks and one
# timed step with --cpu, so that every command is exercised the way the lent GPU will run it.
if ((gpu)); then
    preset=base throughput_preset=large precision=bf16 steps=(--steps 5 --warmup 3 --repeats 3)
    throughput_precision=bf16
else
    preset=tiny throughput_preset=tiny precision=auto steps=(--steps 1 --warmup 1 --repeats 1)
    # The throughput benchmark takes a precision by name: the one `auto` picks on this CPU.
    throughput_precision="$("$python" -c 'from bert_ds.runtime.precision import choose_precision; print(choose_precision("auto", "cpu").name)')"
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/bert_ds_gpu_check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export BERT_DS_CACHE="$scratch/cache"

passed=()
failed=()
# part NAME FILE COMMAND...: run COMMAND with its output in OUT/FILE, record how it ended, go on.
part() {
    local name="$1" file="$2" began=$SECONDS rc=0
    shift 2
    echo "+ $*" >"$out/$file"
    "$@" 2>&1 | tee -a "$out/$file" || rc=$?
    if ((rc == 0)); then passed+=("$name"); else failed+=("$name"); fi
    echo "gpu_check: $name $( ((rc == 0)) && echo passed || echo "FAILED (exit $rc)") in $((SECONDS - began)) s" \
        | tee -a "$out/$file" "$out/gpu.txt"
}

# (b) Two optimizer steps of BERT-BASE in bf16 (ZeRO-1), then a checkpoint.
part pretrain pretrain.txt timeout -k 10 "$limit" "$python" bert_ds/pretrain.py --preset "$preset" --train-steps 2 \
    --precision "$precision" --global-batch-size 8 --micro-batch-size 8 --log-interval 1 --save "$scratch/ckpt"

# (c) One fine-tuning step (8 training rows, batch 8, one epoch) from that checkpoint on SST-2 in
# GLUE's download layout (tests/support/glue_fixtures.py): a cue word decides the label.
glue() {
    if [[ ! -f "$scratch/ckpt/latest" ]]; then
        echo "no checkpoint from the pretrain part to fine-tune"
        return 1
    fi
    local data="$scratch/glue/SST-2" split i label
    mkdir -p "$data"
    for split in train dev; do
        echo -e "sentence\tlabel" >"$data/$split.tsv"
        for i in 0 1 2 3 4 5 6 7; do
            label=$((i % 2))
            echo -e "it was $([[ $label == 1 ]] && echo "a wonderful" || echo "an awful") film number $i\t$label" \
                >>"$data/$split.tsv"
        done
    done
    echo -e "index\tsentence" >"$data/test.tsv"
    for i in 0 1 2 3; do echo -e "$i\tthe film number $i" >>"$data/test.tsv"; done
    timeout -k 10 "$limit" "$python" -m bert_ds.finetune.glue --task sst2 --data-dir "$scratch/glue" \
        --init "$scratch/ckpt" --output "$scratch/glue_out" --max-seq-length 32 --batch-size 8 --epochs 1 \
        --no-save-model || return
    cat "$scratch/glue_out/results.json" && echo
}
part glue glue.txt glue

# (d) The output layer's cross-entropy (model/vocab_cross_entropy.py: one chunk on a GPU) against
# megatron-core's on the card: loss and gradient differences, time and peak memory, at a
# left-to-right BERT-LARGE micro batch's 8,192 rows (64 x 128) in fp32 and bf16.
if ((gpu)); then ce_rows=8192 ce_repeats=5; else ce_rows=256 ce_repeats=1; fi
part cross_entropy cross_entropy.txt timeout -k 10 "$limit" "$python" benchmarks/vocab_cross_entropy.py \
    --rows "$ce_rows" --repeats "$ce_repeats" --json "$out/cross_entropy.json"

# (a) Throughput, BERT-LARGE bf16. Batches that keep the card busy without activation
# recomputation (80+ GB cards).
for seq in 128 512; do
    if [[ "$seq" == 128 ]]; then batch=64; else batch=16; fi
    ((gpu)) || batch=2
    part "large_$seq" "large_${seq}.txt" timeout -k 10 "$limit" "$python" benchmarks/train_throughput.py \
        --presets "$throughput_preset" --seq-length "$seq" --batch "$batch" --precisions "$throughput_precision" "${steps[@]}" \
        --json "$out/large_${seq}.json"
done

say "date: $(date -u +%Y-%m-%dT%H:%MZ)"
say "gpu_check: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
((${#failed[@]} == 0))
