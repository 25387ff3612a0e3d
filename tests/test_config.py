"""Bad sizes are refused by bert_ds with one sentence naming the numbers, before megatron sees them."""

import pytest

from bert_ds.config import ConfigError, model_preset, validate_layout
from bert_ds.model.megatron_config import transformer_config
from bert_ds.runtime.distributed import init_parallel


@pytest.mark.parametrize(
    "overrides, world, tp, pp, expected",
    [
        (dict(hidden_size=100, num_attention_heads=3), 1, 1, 1, "hidden size 100 is not divisible by 3 attention heads"),
        (dict(num_attention_heads=3, hidden_size=96), 2, 2, 1, "3 attention heads are not divisible by tensor parallel size 2"),
        (dict(vocab_size=30521), 2, 2, 1, "vocab size 30521 is not divisible by tensor parallel size 2"),
        (dict(num_layers=3), 2, 1, 2, "3 layers are not divisible by pipeline parallel size 2"),
        ({}, 6, 2, 2, "world size 6 is not divisible by tensor parallel x pipeline parallel = 2 x 2 = 4"),
        ({}, 2, 0, 1, "must be at least 1"),
        (dict(hidden_dropout=1.5), 1, 1, 1, "dropout must be in [0, 1)"),
        (dict(layer_norm_position="middle"), 1, 1, 1, "layer_norm_position must be 'post' or 'pre'"),
    ],
)
def test_bad_layout_is_one_clear_sentence(overrides, world, tp, pp, expected):
    config = model_preset("tiny", **overrides)
    with pytest.raises(ConfigError) as caught:
        validate_layout(config, world, tp, pp)
    message = str(caught.value)
    assert expected in message
    assert message.count("\n") == 0 and message.endswith(".")


def test_every_problem_is_named_at_once():
    config = model_preset("tiny", num_attention_heads=3, hidden_size=96, vocab_size=101)
    with pytest.raises(ConfigError, match="3 attention heads.*vocab size 101"):
        validate_layout(config, 2, 2, 1)


def test_valid_layout_returns_data_parallel_size():
    assert validate_layout(model_preset("large"), world_size=16, tensor_parallel=2, pipeline_parallel=2) == 4


def test_presets_follow_the_paper():
    base, large = model_preset("base"), model_preset("large")
    assert (base.num_layers, base.hidden_size, base.num_attention_heads) == (12, 768, 12)
    assert (large.num_layers, large.hidden_size, large.num_attention_heads) == (24, 1024, 16)
    for name in ("tiny", "mini", "small", "base", "large"):
        preset = model_preset(name)
        assert preset.ffn_hidden_size == 4 * preset.hidden_size
        assert (preset.max_position_embeddings, preset.type_vocab_size) == (512, 2)
        assert preset.hidden_dropout == preset.attention_dropout == 0.1
    assert transformer_config(base).activation_func.__name__ == "gelu"


def test_unknown_preset_and_field_are_named():
    with pytest.raises(ConfigError, match="'huge'.*tiny, mini, small, base, large"):
        model_preset("huge")
    with pytest.raises(ConfigError, match="hidden_sise"):
        model_preset("tiny", hidden_sise=3)


def test_init_parallel_refuses_tp_larger_than_world(layout):
    with pytest.raises(ConfigError, match="world size 1 is not divisible by .* = 2 x 1 = 2"):
        init_parallel(model_preset("tiny"), tensor_parallel=2)
