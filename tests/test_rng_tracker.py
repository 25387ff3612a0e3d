import torch

from bert_ds.runtime.distributed import RNGStatesTracker


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
