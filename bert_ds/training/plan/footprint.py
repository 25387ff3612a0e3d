"""What a run will hold, estimated before any model is built: parameters per rank, memory per
device, and the size of one checkpoint. Pure arithmetic on the model shape and the layout.

Parameters are counted exactly as bert_ds builds them (megatron's column/row-parallel split,
vocab-parallel embedding and decoder bias, replicated LayerNorms, biases after row-parallel
layers, pooler, heads); tests compare the counts with real models at TP/PP 1 and 2.

Memory per device (the heaviest rank: pipeline stage 0 holds the embeddings and the most
micro-batches in flight):
- model states: the ZeRO paper's formula (Rajbhandari et al. 2020, §3 and Figure 1) with
  Psi = this rank's parameters and N = DP: mixed precision (bf16/fp16) keeps 2 bytes of weights,
  2 of gradients and K = 12 of optimizer states (fp32 master, Adam m and v) per parameter; fp32
  keeps 4 + 4 + 8 (m and v) plus the 4-byte fp32 master copy DeepSpeed makes under ZeRO >= 1.
  ZeRO-1 divides the optimizer states by N, ZeRO-2 also the gradients, ZeRO-3 also the weights;
  an offloaded optimizer lives in host memory instead.
- buffers: under ZeRO 1-3, DeepSpeed's gradient reduce bucket (zero_optimization.reduce_bucket_size
  elements, default 5e8) and the flat fp32 copy of this rank's gradient partition it makes for the
  optimizer step while the gradients still exist (4 bytes per parameter / N; stage_1_and_2.py);
  under ZeRO-3 also the weights gathered whole for the layers being computed, at most
  zero_optimization.stage3_max_live_parameters (default 1e9, ds_configs/zero3.json 3e7);
  without ZeRO at DP > 1, the flattened copy of the gradients its all-reduce makes.
- activations of one micro-batch: Korthikanti et al. 2022 ("Reducing Activation Recomputation in
  Large Transformer Models", §4) per layer, tensor parallel without sequence parallelism, written
  for activation width B bytes and dropout-mask width m bytes: s·b·h·(4B + 2m) replicated plus
  s·b·h·12B / t split, plus a·s²·b·(2B + m) / t for the attention scores, softmax and its dropout
  (B = 2, m = 1 gives their 34·s·b·h + 5·a·s²·b at t = 1). The s² terms are left out where
  attention runs as a fused kernel that keeps no score matrix: always on GPUs, on CPUs when
  attention dropout is off. With activation checkpointing a layer keeps only its input
  (s·b·h·B) and one layer is recomputed at a time. Plus the embeddings and the output head on the
  predicted positions (15% for the masked LMs, every position for a left-to-right model): per
  vocabulary entry of a predicted row, 12 bytes in either precision. The logits' buffer holds the
  exponentials and then the gradient (model/vocab_cross_entropy.py) and the bias is added inside
  the decoder's matrix multiply; the rest per entry was measured, not derived: a mini LTR model's
  peak memory grew by ~10 bytes an entry in bf16 from 32 to 64 sequences of 128 tokens (2.51 ->
  4.02 GB) and ~11 in fp32 (3.48 -> 5.09 GB, before the bias moved into the multiply); ~16 in
  bf16 (3.53 -> 5.75 GB) while the cross-entropy kept an fp32 copy and softmax, before
  2026-12-08). With pipelines, stage 0 holds min(PP, accumulation) micro-batches (DeepSpeed's
  1F1B schedule).
Not counted: the CUDA context and allocator fragmentation (typically 1-3 GiB per GPU), and host
memory of data-loader workers.

Checkpoint size: the module weights of every model-parallel rank in the training dtype plus the
optimizer states of every rank (fp32 masters, m, v: 12 bytes per parameter; torch's Adam without
ZeRO keeps m and v only, next to fp32 weights), plus a small per-rank file.
"""

from __future__ import annotations

from dataclasses import dataclass

from bert_ds.config import ModelConfig

DEEPSPEED_REDUCE_BUCKET = 500_000_000
"""DeepSpeed's default zero_optimization.reduce_bucket_size (elements)."""
DEEPSPEED_MAX_LIVE_PARAMETERS = 1_000_000_000
"""DeepSpeed's default zero_optimization.stage3_max_live_parameters (elements)."""
RANK_FILE_BYTES = 64 * 1024
"""Our per-rank file (RNG streams, data-stream position, layout record), about."""
GIB = 2**30
LOGIT_BYTES = 12
"""Memory per vocabulary entry of a predicted row in either precision (measured; module docstring)."""


def _layer_params(config: ModelConfig, tp: int) -> int:
    """One transformer layer on one TP rank: QKV, FC1 (weights and biases) and the attention
    output and FC2 weights are split; their two output biases and both LayerNorms are whole."""
    h = config.hidden_size
    split = 3 * h * h + 3 * h + h * h + 4 * h * h + 4 * h + 4 * h * h
    return split // tp + h + h + 2 * h + 2 * h


def _embedding_parameters(config: ModelConfig, tp: int) -> int:
    """Word (vocab-parallel), position and token-type embeddings and their LayerNorm."""
    h = config.hidden_size
    return config.vocab_size // tp * h + config.max_position_embeddings * h + config.type_vocab_size * h + 2 * h


def stage_parameters(config: ModelConfig, tp: int = 1, pp: int = 1, stage: int = 0, with_nsp: bool = True) -> int:
    """Parameters one rank of pipeline stage `stage` holds at tensor-parallel size `tp`."""
    h, vocab_slice = config.hidden_size, config.vocab_size // tp
    heads = (h * h + h) + 2 * h + vocab_slice  # LM head transform, its LayerNorm, the decoder bias
    if with_nsp:
        heads += (h * h + h) + (2 * h + 2)  # pooler, NSP classifier
    final_norm = 2 * h if config.layer_norm_position == "pre" else 0
    count = config.num_layers // pp * _layer_params(config, tp)
    first, last = stage == 0, stage == pp - 1
    if first:
        count += _embedding_parameters(config, tp)
    if last:
        count += heads + final_norm
        if not first:
            count += vocab_slice * h  # the last stage's copy of the tied word embedding
    return count


def finetuning_parameters(config: ModelConfig, tp: int, head_outputs: int, pooler: bool = True) -> int:
    """Parameters one TP rank holds when fine-tuning: the encoder, the pooler (not for span
    extraction) and a replicated task head of `head_outputs` outputs."""
    h = config.hidden_size
    count = _embedding_parameters(config, tp) + config.num_layers * _layer_params(config, tp)
    count += 2 * h if config.layer_norm_position == "pre" else 0
    return count + (h * h + h if pooler else 0) + (h + 1) * head_outputs


def model_parameters(config: ModelConfig, with_nsp: bool = True) -> int:
    """Every parameter of the model once (the decoder shares the word embedding)."""
    return stage_parameters(config, 1, 1, 0, with_nsp)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device; `host` is what lives in CPU memory instead (offloaded optimizer)."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int
    activations: int
    host: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.buffers + self.activations


def model_state_bytes(params: int, precision: str, zero_stage: int, dp: int, offload: bool) -> tuple[int, int, int, int]:
    """(weights, gradients, optimizer on the device, optimizer in host memory) for `params`
    parameters per rank, after the ZeRO paper (see the module docstring)."""
    mixed = precision in ("bf16", "fp16")
    width = 2 if mixed else 4
    optimizer = 12 if mixed or zero_stage >= 1 else 8
    weights = params * width / (dp if zero_stage >= 3 else 1)
    gradients = params * width / (dp if zero_stage >= 2 else 1)
    states = params * optimizer / (dp if zero_stage >= 1 else 1)
    if offload:
        return int(weights), int(gradients), 0, int(states)
    return int(weights), int(gradients), int(states), 0


def buffer_bytes(params: int, precision: str, zero_stage: int, dp: int, zero_config: dict | None = None) -> int:
    """DeepSpeed's working copies beyond the model states: under ZeRO the reduce bucket and, at
    the step, the rank's gradient partition flattened (in 16 bits, for mixed precision) and in fp32;
    under ZeRO-3 also the weights gathered whole for the layers being computed (at most
    stage3_max_live_parameters); without ZeRO the flat all-reduce buffer at DP > 1 and, for mixed
    precision, the fp32 copy of every gradient its FP16_UnfusedOptimizer makes before each step
    (at one bf16 replica: bert_ds's fp32 gradient accumulators, the same 4 bytes per parameter;
    benchmarks/memory.py). `zero_config` is the DeepSpeed JSON's zero_optimization section."""
    zero_config = zero_config or {}
    mixed = precision in ("bf16", "fp16")
    width = 2 if mixed else 4
    if zero_stage >= 1:
        reduce_bucket = zero_config.get("reduce_bucket_size", DEEPSPEED_REDUCE_BUCKET)
        live = min(zero_config.get("stage3_max_live_parameters", DEEPSPEED_MAX_LIVE_PARAMETERS), params) if zero_stage == 3 else 0
        return (min(reduce_bucket, params) + live) * width + (4 + (2 if mixed else 0)) * params // dp
    return (params * width if dp > 1 else 0) + (4 * params if mixed else 0)


def activation_bytes(
    config: ModelConfig, seq: int, micro: int, tp: int, layers: int, precision: str, gpu: bool,
    predicted: float = 0.15, embeddings: bool = True,
) -> int:
    """One micro-batch's saved activations on one rank holding `layers` layers (see the module docstring)."""
    s, b, h, a = seq, micro, config.hidden_size, config.num_attention_heads
    width = 2 if precision in ("bf16", "fp16") else 4
    # bert_ds's CPU dropout keeps its masks as fp32 multipliers; torch's GPU dropout as bytes.
    mask = 0 if config.hidden_dropout == 0 else (1 if gpu else 4)
    attention_mask = 0 if config.attention_dropout == 0 else (1 if gpu else 4)
    scores_kept = not gpu and config.attention_dropout > 0
    if config.activation_checkpointing:
        per_layer_kept = s * b * h * width
        recompute = _layer_activations(s, b, h, a, tp, width, mask, attention_mask, scores_kept)
        total = layers * per_layer_kept + recompute
    else:
        total = layers * _layer_activations(s, b, h, a, tp, width, mask, attention_mask, scores_kept)
    if embeddings:
        rows = int(round(predicted * s * b))
        total += s * b * h * (2 * width + mask)  # embedding LayerNorm input and output, dropout
        total += rows * (3 * h * width + LOGIT_BYTES * config.vocab_size // tp)  # output head, logits (docstring)
    return int(total)


def _layer_activations(s, b, h, a, tp, width, mask, attention_mask, scores_kept) -> float:
    replicated = s * b * h * (4 * width + 2 * mask)
    split = s * b * h * 12 * width / tp
    scores = a * s * s * b * (2 * width + attention_mask) / tp if scores_kept else 0
    return replicated + split + scores


def memory_per_device(
    config: ModelConfig, *, seq: int, micro: int, accumulation: int, tp: int, pp: int, dp: int, zero_stage: int,
    precision: str, gpu: bool, offload: bool = False, zero_config: dict | None = None, with_nsp: bool = True,
    predicted: float = 0.15,
) -> MemoryEstimate:
    """The heaviest rank's memory (stage 0; the last stage when it is also the first). `predicted`:
    the share of positions whose token is predicted (the mask probability; 1 for LTR)."""
    params = max(stage_parameters(config, tp, pp, stage, with_nsp) for stage in range(pp))
    weights, gradients, optimizer, host = model_state_bytes(params, precision, zero_stage, dp, offload)
    in_flight = min(pp, accumulation)
    activations = in_flight * activation_bytes(config, seq, micro, tp, config.num_layers // pp, precision, gpu, predicted)
    return MemoryEstimate(weights, gradients, optimizer, buffer_bytes(params, precision, zero_stage, dp, zero_config),
                          activations, host)


def checkpoint_bytes(config: ModelConfig, *, tp: int, pp: int, dp: int, zero_stage: int, precision: str,
                     with_nsp: bool = True) -> int:
    """One checkpoint on disk, all ranks' files together."""
    saved = tp * sum(stage_parameters(config, tp, pp, stage, with_nsp) for stage in range(pp))
    mixed = precision in ("bf16", "fp16")
    weights = saved * (2 if mixed else 4)
    # ZeRO (and DeepSpeed's bf16 optimizer) save fp32 masters + m + v; torch's AdamW m + v.
    optimizer = saved * (12 if zero_stage >= 1 or mixed else 8)
    if zero_stage >= 3:
        weights = 0  # the model file holds no full weights; the fp32 partitions are the weights
    return int(weights + optimizer + tp * pp * dp * RANK_FILE_BYTES)
