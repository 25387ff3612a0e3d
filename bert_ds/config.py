"""Model presets and parallel layout sizes: the one place for model defaults and size checks.

`validate_layout` is the single gate every entrypoint goes through before megatron or DeepSpeed
see a size: a bad combination is refused here with one sentence naming the numbers, instead of
an assertion from deep inside a library.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

from bert_ds.errors import ConfigError  # noqa: F401 (raised here, imported from here by many)




# The sentence splitters a run may name (implemented in data/text/splitters.py, where the default's
# measurements are); named here so the data settings below depend on nothing above them.
SENTENCE_SPLITTERS = ("regex", "punkt")
DEFAULT_SENTENCE_SPLITTER = "punkt"


# Table 5's pre-training objectives (data/pairs.py builds their inputs, data/masking.py their targets):
# "mlm_nsp" BERT's masked LM + next sentence prediction; "mlm" the paper's "No NSP" row: the same
# sentence-pair inputs (segments A and B, token types 0 and 1) with the NSP loss dropped;
# "mlm_full_sentences" RoBERTa's FULL-SENTENCES input: one contiguous full-length segment, token
# type always 0, no NSP; "ltr" a left-to-right LM (causal attention, next-token targets) on full
# segments, the paper's "LTR & No NSP" row.
OBJECTIVES = ("mlm_nsp", "mlm", "mlm_full_sentences", "ltr")
PAIR_OBJECTIVES = ("mlm_nsp", "mlm")
"""The objectives whose inputs are NSP's sentence pairs."""

# Fine-tuning heads (model/heads.py), named here so the dry run's plan (torch-free) reads them too.
TASK_KINDS = ("classification", "multiple_choice", "span", "tagging")
POOLED_KINDS = ("classification", "multiple_choice")
"""Kinds scored from one state per sequence (the pooler's); span and tagging score every token."""


def valid_seed(seed: int) -> bool:
    """Seeds are in [0, 2**32): numpy's generators refuse negative ones, and example ids pack one in 64 bits."""
    return 0 <= seed < 2**32


@dataclass(frozen=True)
class ModelConfig:
    """Shape and regularisation of one BERT encoder (Devlin et al. 2018, Table/§3)."""

    num_layers: int
    """Transformer layers L."""
    hidden_size: int
    """Hidden size H."""
    num_attention_heads: int
    """Attention heads A; H must be divisible by A."""
    vocab_size: int = 30522
    """Rows of the word embedding; set from the tokenizer (30522 = Google's uncased WordPiece)."""
    max_position_embeddings: int = 512
    """Learned absolute positions; the paper pre-trains up to 512 tokens."""
    type_vocab_size: int = 2
    """Segment (token type) ids: 0 for sentence A, 1 for sentence B."""
    hidden_dropout: float = 0.1
    """Dropout on embeddings and on every sub-layer output before the residual add."""
    attention_dropout: float = 0.1
    """Dropout on the attention probabilities."""
    layernorm_epsilon: float = 1e-12
    """LayerNorm epsilon of Google's and Hugging Face's BERT checkpoints."""
    init_method_std: float = 0.02
    """Std of the truncated-normal-free N(0, std) init BERT uses for every weight matrix."""
    layer_norm_position: Literal["post", "pre"] = "post"
    """"post": original BERT (LN after each residual add); "pre": LN before each sub-layer."""
    causal: bool = False
    """Left-to-right attention (Table 5's LTR ablation) instead of bidirectional."""
    activation_checkpointing: bool = False
    """Recompute each layer's activations during backward: less memory, about 1/3 more compute."""

    @property
    def ffn_hidden_size(self) -> int:
        """Intermediate (feed-forward) size: 4H for every preset, as in the paper."""
        return 4 * self.hidden_size

    def replace(self, **changes) -> "ModelConfig":
        """A copy with some fields changed (the config is frozen so presets stay intact)."""
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # tiny exists for tests: small enough that a 2-rank CPU step takes milliseconds.
    "tiny": ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4),
    # mini/small follow Google's compact BERTs (Turc et al. 2019).
    "mini": ModelConfig(num_layers=4, hidden_size=256, num_attention_heads=4),
    "small": ModelConfig(num_layers=4, hidden_size=512, num_attention_heads=8),
    "base": ModelConfig(num_layers=12, hidden_size=768, num_attention_heads=12),
    "large": ModelConfig(num_layers=24, hidden_size=1024, num_attention_heads=16),
}


def model_preset(name: str, **overrides) -> ModelConfig:
    """The preset `name` with `overrides` applied (e.g. vocab_size from the tokenizer)."""
    if name not in PRESETS:
        raise ConfigError(f"Unknown model preset {name!r}; choose one of {', '.join(PRESETS)}.")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(ModelConfig)}
    if unknown:
        raise ConfigError(f"Unknown model field(s) {', '.join(sorted(unknown))} for preset {name!r}.")
    return PRESETS[name].replace(**overrides)


def validate_layout(
    model: ModelConfig, world_size: int, tensor_parallel: int = 1, pipeline_parallel: int = 1
) -> int:
    """Check that `model` splits over world = TP x PP x DP; return DP.

    Every violated rule is named in one sentence, so a user fixes them all in one go.
    """
    problems = []
    if tensor_parallel < 1 or pipeline_parallel < 1:
        problems.append(
            f"tensor parallel ({tensor_parallel}) and pipeline parallel ({pipeline_parallel}) "
            "sizes must be at least 1"
        )
    else:
        if model.hidden_size % model.num_attention_heads:
            problems.append(
                f"hidden size {model.hidden_size} is not divisible by "
                f"{model.num_attention_heads} attention heads"
            )
        if model.num_attention_heads % tensor_parallel:
            problems.append(
                f"{model.num_attention_heads} attention heads are not divisible by "
                f"tensor parallel size {tensor_parallel}"
            )
        if model.vocab_size % tensor_parallel:
            problems.append(
                f"vocab size {model.vocab_size} is not divisible by tensor parallel size "
                f"{tensor_parallel}"
            )
        if model.ffn_hidden_size % tensor_parallel:
            problems.append(
                f"feed-forward size {model.ffn_hidden_size} is not divisible by tensor parallel "
                f"size {tensor_parallel}"
            )
        if model.num_layers % pipeline_parallel:
            problems.append(
                f"{model.num_layers} layers are not divisible by pipeline parallel size "
                f"{pipeline_parallel}"
            )
        if world_size % (tensor_parallel * pipeline_parallel):
            problems.append(
                f"world size {world_size} is not divisible by tensor parallel x pipeline parallel "
                f"= {tensor_parallel} x {pipeline_parallel} = {tensor_parallel * pipeline_parallel}"
            )
    if not 0.0 <= model.hidden_dropout < 1.0 or not 0.0 <= model.attention_dropout < 1.0:
        problems.append(
            f"dropout must be in [0, 1), got hidden {model.hidden_dropout} and attention "
            f"{model.attention_dropout}"
        )
    if model.layer_norm_position not in ("post", "pre"):
        problems.append(f"layer_norm_position must be 'post' or 'pre', got {model.layer_norm_position!r}")
    if problems:
        raise ConfigError("Invalid configuration: " + "; ".join(problems) + ".")
    return world_size // (tensor_parallel * pipeline_parallel)


@dataclass(frozen=True)
class DataConfig:
    """How raw text becomes pre-training batches (bert_ds/data)."""

    seq_length: int = 128
    """Tokens per sequence, [CLS]/[SEP] included: 128 for the paper's phase 1, 512 for phase 2."""
    micro_batch_size: int = 8
    """Sequences per batch this rank yields."""
    objective: Literal["mlm_nsp", "mlm", "mlm_full_sentences", "ltr"] = "mlm_nsp"
    """Table 5's objectives (OBJECTIVES): MLM + NSP (default), MLM on the same pairs without NSP,
    MLM on full-length single segments (RoBERTa), left-to-right LM (causal, no NSP)."""
    mask_prob: float = 0.15
    """Share of non-special tokens selected for prediction."""
    dynamic_masking: bool = True
    """True: new masks each time an example is drawn; False: static, one mask per example (from the seed)."""
    short_seq_prob: float = 0.1
    """Probability of a shorter target length for an NSP pair (the paper's 0.1)."""
    block_documents: int = 64
    """Documents read, paired and shuffled together; NotNext partners come from the same block.
    A resume re-reads at most one block."""
    num_workers: Optional[int] = 0
    """DataLoader worker processes per rank (0: build batches in the training process; None:
    `auto`, which the launch plan resolves before a loader is built)."""
    txt_documents: Literal["file", "blank_line"] = "file"
    """.txt sources: one document per file, or one per blank-line separated block."""
    sentence_splitter: str = DEFAULT_SENTENCE_SPLITTER
    """The sentence splitter (data/text/splitters.py) that cuts paragraphs into NSP's sentences."""
    seed: int = 1234
    """Seeds file order, pairing, shuffling and masking."""

    def validate(self, max_position_embeddings: int = 512) -> None:
        """Refuse impossible values in one sentence naming them."""
        problems = self.problems(max_position_embeddings)
        if problems:
            raise ConfigError("Invalid data configuration: " + "; ".join(problems) + ".")

    def problems(self, max_position_embeddings: int = 512) -> list[str]:
        """Each impossible value, named as its --option (the fields are pre-training's options)."""
        problems = []
        if not 8 <= self.seq_length <= max_position_embeddings:
            problems.append(f"--seq-length {self.seq_length} must be in [8, {max_position_embeddings}]")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:  # None: `auto`, resolved by the plan
            problems.append(f"--micro-batch-size {self.micro_batch_size} must be at least 1")
        if self.objective not in OBJECTIVES:
            problems.append(f"--objective {self.objective!r} must be one of {', '.join(OBJECTIVES)}")
        if not 0.0 < self.mask_prob < 1.0:
            problems.append(f"--mask-prob {self.mask_prob} must be in (0, 1)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            problems.append(f"--short-seq-prob {self.short_seq_prob} must be in [0, 1]")
        if self.block_documents < 2:
            problems.append(f"--block-documents {self.block_documents} must be at least 2 (NSP needs a second document)")
        if self.num_workers is not None and self.num_workers < 0:
            problems.append(f"--num-workers {self.num_workers} must be >= 0")
        if self.txt_documents not in ("file", "blank_line"):
            problems.append(f"--txt-documents {self.txt_documents!r} must be 'file' or 'blank_line'")
        if self.sentence_splitter not in SENTENCE_SPLITTERS:
            problems.append(f"--sentence-splitter {self.sentence_splitter!r} must be one of {', '.join(SENTENCE_SPLITTERS)}")
        if not valid_seed(self.seed):
            problems.append(f"--seed {self.seed} must be in [0, 2**32)")
        return problems


def padded_vocab_size(vocab_size: int, multiple: int = 128) -> int:
    """Pad the embedding to a multiple of 128 (padding rows are never a target): GPU-friendly
    shapes, divisible by any power-of-two TP up to 128, and the same at every layout, so a
    checkpoint moves between TP sizes."""
    return -(-vocab_size // multiple) * multiple
