"""The "+ BiLSTM" head's LSTM: bert_ds's unpacked one (model/bilstm.py) against torch's
bidirectional LSTM on a packed sequence (what bert_ds ran before 2026-12-06, and the usual way to
keep padding out of the backward direction), forward and backward on a padded batch whose
lengths are drawn as SQuAD windows' are (most shorter than the window), in fp32 and bf16.

Prints seconds per forward + backward for each and the ratio packed / bert_ds, measured in the
same run.

Usage: python benchmarks/bilstm_speed.py [--seq 256] [--batch 32] [--hidden 256] [--threads 1]
       [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_ds.model.bilstm import PaddedBiLSTM  # noqa: E402


def packed_step(lstm: torch.nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> None:
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    outputs, _ = lstm(packed)
    outputs, _ = torch.nn.utils.rnn.pad_packed_sequence(outputs, total_length=x.shape[0])
    outputs.float().sum().backward()


def padded_step(lstm: PaddedBiLSTM, x: torch.Tensor, lengths: torch.Tensor) -> None:
    outputs, _ = lstm(x, lengths)
    outputs.float().sum().backward()


def seconds(step, repeats: int) -> float:
    step()  # warm-up: oneDNN builds its kernels on the first call
    began = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - began) / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256, help="the encoder's hidden size (H/2 per direction)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,))
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        ours = PaddedBiLSTM(args.hidden, args.hidden // 2).to(dtype)
        packed = torch.nn.LSTM(args.hidden, args.hidden // 2, bidirectional=True).to(dtype)
        x = torch.randn(args.seq, args.batch, args.hidden, dtype=dtype, requires_grad=True)
        t_packed = seconds(lambda: packed_step(packed, x, lengths), args.repeats)
        t_ours = seconds(lambda: padded_step(ours, x, lengths), args.repeats)
        row = dict(dtype=str(dtype).removeprefix("torch."), packed_s=round(t_packed, 4), bert_ds_s=round(t_ours, 4),
                   packed_over_bert_ds=round(t_packed / t_ours, 2))
        rows.append(row)
        print(f"{row['dtype']:>8}: packed torch LSTM {t_packed:.3f} s, bert_ds {t_ours:.3f} s per fwd+bwd "
              f"[{args.seq} x {args.batch} x {args.hidden}], {args.threads} thread(s): packed / bert_ds "
              f"{row['packed_over_bert_ds']:.2f}x", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(settings=vars(args), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
