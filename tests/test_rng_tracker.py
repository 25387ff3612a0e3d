import torch

from bert_ds.runtime.distributed import MODEL_PARALLEL_RNG, RNGStatesTracker, load_rng_state_dict, rng_state_dict


def test_fork_uses_its_own_stream_and_restores_the_default():
    tracker = RNGStatesTracker()
    tracker.add("a", seed=5)
    torch.manual_seed(0)
    expected_default = torch.rand(3)
    torch.manual_seed(0)
    with tracker.fork("a"):
        first = torch.rand(3)
    assert torch.equal(torch.rand(3), expected_default)  # default stream untouched
    with tracker.fork("a"):
        second = torch.rand(3)
    assert not torch.equal(first, second)  # the stream advanced
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), first)  # and started from its own seed


def test_state_round_trip_replays_the_stream():
    tracker = RNGStatesTracker()
    tracker.add("a", seed=1)
    saved = tracker.state_dict()
    with tracker.fork("a"):
        draw = torch.rand(4)
    restored = RNGStatesTracker()
    restored.load_state_dict(saved)
    with restored.fork("a"):
        assert torch.equal(torch.rand(4), draw)


def _draws(layout) -> torch.Tensor:
    with layout.rng_tracker.fork():
        return torch.rand(4)


def test_a_checkpoint_of_another_device_kind_reseeds_its_streams(layout):
    """A GPU checkpoint's model-parallel streams are CUDA generator states (16 bytes): loaded as
    they were on a CPU, the first attention dropout failed ("RNG state is wrong size"). They are
    reseeded from (seed, step), with one line saying so; a checkpoint of the same kind resumes
    its streams exactly."""
    before = rng_state_dict(layout)  # the session's layout: left as found
    try:
        _check_reseeding(layout)
    finally:
        load_rng_state_dict(layout, before, seed=0, step=0)


def _check_reseeding(layout):
    same_kind = rng_state_dict(layout)
    assert same_kind["device_type"] == "cpu"
    expected = _draws(layout)
    assert load_rng_state_dict(layout, same_kind, seed=3, step=10) == ""
    assert torch.equal(_draws(layout), expected)  # exact resume

    cuda_shaped = dict(same_kind, device=torch.zeros(16, dtype=torch.uint8),
                       tracker={MODEL_PARALLEL_RNG: torch.zeros(16, dtype=torch.uint8)})
    del cuda_shaped["device_type"]  # as written before the device kind was recorded
    note = load_rng_state_dict(layout, cuda_shaped, seed=3, step=10)
    assert note.startswith("RNG streams: the checkpoint was written on cuda, this run is on cpu")
    reseeded = _draws(layout)  # dropout draws work again
    load_rng_state_dict(layout, dict(cuda_shaped, device_type="cuda"), seed=3, step=10)
    assert torch.equal(_draws(layout), reseeded)  # deterministic: the same seed and step, the same stream
    load_rng_state_dict(layout, cuda_shaped, seed=3, step=11)
    assert not torch.equal(_draws(layout), reseeded)
