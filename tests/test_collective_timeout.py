"""Every process group a run collects over has the run's collective timeout: megatron builds its
tensor-, pipeline- and data-parallel groups with 30 minutes of its own unless told otherwise, so a
rank whose peer went silent would wait half an hour inside the gradient all-reduce."""

import datetime
import json

import torch

from tests.support.helpers import run_on_ranks


def _worker(rank, out_file):
    import torch.distributed as dist

    from bert_ds.config import model_preset
    from bert_ds.runtime.distributed import init_parallel

    layout = init_parallel(model_preset("tiny", vocab_size=128), tensor_parallel=1, pipeline_parallel=1, timeout_s=120.0)
    groups = dict(world=dist.group.WORLD, tensor=layout.tp_group, pipeline=layout.pp_group, data=layout.dp_group)
    timeouts = {name: group._get_backend(torch.device("cpu")).options._timeout.total_seconds() for name, group in groups.items()}
    with open(out_file, "w") as out:
        json.dump(timeouts, out)


def test_megatrons_groups_get_the_runs_collective_timeout(tmp_path):
    out = tmp_path / "timeouts.json"
    run_on_ranks(_worker, 1, str(out))
    timeouts = json.loads(out.read_text())
    assert timeouts == {name: datetime.timedelta(minutes=2).total_seconds() for name in ("world", "tensor", "pipeline", "data")}
