"""A training step reads the device back a fixed, small number of times, however many micro
batches it accumulates: on a GPU every such read (`.item()`, `float(t)`, boolean indexing,
`.tolist()`, `.cpu()`) stalls the host until the device has drained its queue.

Counted on CPU with real processes (tests/support/host_reads.py), `Tensor.tolist`/`Tensor.cpu`
(which bypass the dispatcher) wrapped; the pipeline's last stage is checked in test_pipeline.py.
Reads of the loader's host copy go through numpy and are not device reads.
"""

import json

import pytest
import torch

from bert_ds.training.config.args import parse_args
from tests.support.helpers import run_on_ranks, synthetic_batch
from tests.support.host_reads import HostReads

VOCAB = 128
MICRO = 4
# The flags every rank agrees on (signal, non-finite loss, skipped update: one .tolist()) and the
# optimizer's gradient norm, read once to clip and to detect overflow (training/engine/optim.py,
# master_weights.py). Dropout is off: CPU dropout draws its mask seed on the host (model/dropout.py),
# a CPU-only path (GPUs use torch's kernel).
MAX_READS_PER_STEP = 2


def _worker(rank, out_file, accumulation, steps, precision):
    from bert_ds.training import job
    from bert_ds.training.loop.steps import plain_step
    from bert_ds.training.loop.trainer import StopRequest
    from bert_ds.training.plan.resolve import run_model_config

    run = parse_args([
        "--preset", "tiny", "--global-batch-size", str(accumulation * MICRO), "--micro-batch-size", str(MICRO),
        "--dropout", "0", "--warmup-steps", "0", "--train-steps", "20", "--precision", precision,
    ])
    model_config = run_model_config(run, VOCAB)
    layout = job.setup_parallel(run, model_config)
    engine, _, _ = job.setup_engine(run, model_config, layout)
    batches = iter([synthetic_batch(VOCAB, batch=MICRO, seq=32, seed=s) for s in range((steps + 1) * accumulation)])
    stop = StopRequest()
    plain_step(engine, batches, accumulation, layout)  # the first step builds DeepSpeed's buffers
    reads = HostReads()
    original = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu")}

    def counted(name):
        def method(self, *args, **kwargs):
            reads.names.append(f"Tensor.{name}")
            return original[name](self, *args, **kwargs)
        return method

    for name in original:
        setattr(torch.Tensor, name, counted(name))
    try:
        with reads:
            for _ in range(steps):
                result = plain_step(engine, batches, accumulation, layout)
                stop.agreed(layout, result.loss, False)
    finally:
        for name, method in original.items():
            setattr(torch.Tensor, name, method)
    with open(out_file, "w") as out:
        json.dump(reads.names, out)


def _reads_per_step(tmp_path, accumulation: int, precision: str, steps: int = 3) -> list[str]:
    out = tmp_path / f"reads-{accumulation}-{precision}.json"
    run_on_ranks(_worker, 1, str(out), accumulation, steps, precision)
    names = json.loads(out.read_text())
    assert len(names) % steps == 0, names
    return names[: len(names) // steps]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_reads_the_device_a_fixed_few_times(tmp_path, precision):
    one = _reads_per_step(tmp_path, 1, precision)
    four = _reads_per_step(tmp_path, 4, precision)
    assert sorted(four) == sorted(one), f"reads grow with micro batches: {one} -> {four}"
    assert one.count("Tensor.tolist") == 1, one
    assert len(one) <= MAX_READS_PER_STEP, one
