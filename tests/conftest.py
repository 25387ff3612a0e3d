import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.distributed import init_parallel, teardown_parallel


@pytest.fixture(scope="session")
def layout():
    """A world of one (gloo) with megatron's groups at TP=1, for single-process model tests."""
    torch.set_num_threads(2)
    parallel = init_parallel(model_preset("tiny"))
    yield parallel
    teardown_parallel()
