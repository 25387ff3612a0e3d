#!/usr/bin/env bash
# BooksCorpus + English Wikipedia fetched once from the hub into prepared folders (a CPU job),
# the folders slurm/pretrain_large.sh reads by default:
#   cd /path/to/bert_ds && sbatch slurm/prepare_data.sh        on a node with internet access
#   bash slurm/prepare_data.sh                                 the same without Slurm
# Each corpus becomes DATA_DIR/NAME: Parquet shards of raw text and manifest.json (python -m
# bert_ds.data.prepare). Killed or requeued, the job continues after the last complete shard;
# a folder already complete is skipped.
#   DATA_DIR     default $REPO/data/prepared
#   CORPORA      which of them, space separated (default: "bookcorpus wikipedia")
#   BOOKCORPUS   hub source of BookCorpus (default hf:bookcorpus/bookcorpus@refs/convert/parquet,
#                the hub's Parquet conversion of the dataset, read as runs of 256 sentences)
#   WIKIPEDIA    hub source of Wikipedia (default hf:wikimedia/wikipedia:20231101.en)
#   NUM_PROC     processes per corpus (default: SLURM_CPUS_PER_TASK, else 4)
#   SHARD_SIZE   most bytes per shard (default 256MiB); PYTHON
#   HF_TOKEN     for gated or private datasets; HF_HOME for huggingface_hub's own cache
#SBATCH --job-name=bert-prepare
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=12:00:00
#SBATCH --requeue
#SBATCH --output=slurm-%x-%j.out
set -euo pipefail

REPO="${BERT_DS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
DATA_DIR="${DATA_DIR:-$REPO/data/prepared}"
CORPORA="${CORPORA:-bookcorpus wikipedia}"
BOOKCORPUS="${BOOKCORPUS:-hf:bookcorpus/bookcorpus@refs/convert/parquet}"
WIKIPEDIA="${WIKIPEDIA:-hf:wikimedia/wikipedia:20231101.en}"
NUM_PROC="${NUM_PROC:-${SLURM_CPUS_PER_TASK:-4}}"
SHARD_SIZE="${SHARD_SIZE:-256MiB}"

for corpus in $CORPORA; do
  case "$corpus" in
    bookcorpus) spec="$BOOKCORPUS" ;;
    wikipedia) spec="$WIKIPEDIA" ;;
    *) echo "error: CORPORA names '$corpus'; choose among: bookcorpus wikipedia" >&2; exit 2 ;;
  esac
  echo "bert_ds: preparing $corpus from $spec into $DATA_DIR/$corpus"
  "$PYTHON" -m bert_ds.data.prepare "$spec" --output "$DATA_DIR/$corpus" --num-proc "$NUM_PROC" --shard-size "$SHARD_SIZE"
done
