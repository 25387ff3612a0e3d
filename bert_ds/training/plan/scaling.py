"""What one pre-training step costs a rank in communication, and the step time that predicts.

For a layout TP x PP x DP (ranks numbered as DeepSpeed's topology does: TP innermost, then DP, then
PP), per rank and optimizer step, with b bytes per element (2 for bf16/fp16, 4 for fp32), m micro
batches of B sequences of s tokens, hidden size h, L layers, P parameters on the heaviest rank:

    TP  Megatron's tensor parallelism all-reduces B·s·h elements twice in each layer's forward
        (after attention and after the MLP) and twice in its backward; the vocabulary-parallel
        embedding and the tied decoder add one each on the stages that hold them. A ring
        all-reduce sends 2·(TP-1)/TP of the payload per rank. With PP, a stage also all-gathers
        the activations (or gradients) it received in TP parts (below).
    PP  each stage boundary sends B·s·h activations forward and their gradients back, per micro
        batch: a middle stage sends both, an edge stage one. DeepSpeed's pipeline splits them over
        the TP ranks, so each sends 1/TP of them. Once per step the first and last stages all-
        reduce the gradient of the word embeddings they share (V·h/TP elements).
    DP  the gradients, as DeepSpeed does it on gloo (benchmarks/comm_volume.py measured ZeRO-1
        and 2): ZeRO-0 all-reduces them once per step (2·(DP-1)/DP·P·b); ZeRO-1 too, then all-
        gathers the updated weights ((DP-1)/DP·P·b); ZeRO-2 all-reduces them after every micro
        batch and all-gathers the weights once (a reduce-scatter would send half: the ZeRO paper's
        figure); ZeRO-3 (not measured) all-gathers the weights for every micro batch's forward
        and backward and reduce-scatters its gradients.

Time: model FLOPs (metrics.bert_flops_per_sequence) over the achieved FLOP/s per GPU, stretched by
the pipeline bubble (m + PP - 1) / m, plus each kind's bytes over its link: NVLink inside a node,
the network between nodes once the group spans nodes. Nothing is overlapped, so the step time is an
upper bound; DeepSpeed overlaps most of the DP reduction with the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from bert_ds.config import ModelConfig
from bert_ds.training.loop.metrics import bert_flops_per_sequence

MASKED_FRACTION = 0.15


@dataclass(frozen=True)
class Interconnect:
    """The cluster the estimate is for."""

    gpus_per_node: int = 8
    intra_node_gb_s: float = 450.0
    """GB/s one GPU sends inside a node (NVLink 4 on H100/H200: 900 GB/s both ways)."""
    inter_node_gb_s: float = 50.0
    """GB/s one GPU sends to other nodes (one 400 Gb/s InfiniBand NDR or RoCE NIC per GPU)."""
    gpu_tflops: float = 300.0
    """Model TFLOP/s one GPU achieves (about 30% of H100/H200's 989 dense bf16 TFLOP/s); replace it
    with the FLOP/s your own runs log."""


@dataclass(frozen=True)
class CommVolume:
    """Bytes one rank sends per optimizer step, by kind (the heaviest rank of each kind)."""

    tp: float
    pp: float
    dp: float

    @property
    def total(self) -> float:
        return self.tp + self.pp + self.dp


@dataclass(frozen=True)
class ScalingEstimate:
    volume: CommVolume
    compute_s: float
    """Model FLOPs of one step on one GPU over the achieved rate, with the pipeline bubble."""
    bubble: float
    """The pipeline bubble's share of the compute time."""
    tp_s: float
    pp_s: float
    dp_s: float
    crosses_nodes: dict
    """{"TP"|"PP"|"DP": whether that group spans nodes}."""
    tokens_per_step: int

    @property
    def step_s(self) -> float:
        return self.compute_s + self.tp_s + self.pp_s + self.dp_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s


def ring_share(group: int) -> float:
    """The share of a payload each rank sends in a ring all-reduce (reduce-scatter + all-gather)."""
    return 2.0 * (group - 1) / group if group > 1 else 0.0


def comm_volume(config: ModelConfig, *, seq: int, micro: int, accumulation: int, tp: int, pp: int, dp: int,
                zero_stage: int, element_bytes: int, parameters_per_rank: int) -> CommVolume:
    activation = micro * seq * config.hidden_size * element_bytes  # one B x s x h tensor
    edge_all_reduces = 2 if pp == 1 else 1  # the embedding and the tied decoder: one each, on their stages
    tp_all_reduces = 4 * (config.num_layers // pp) + edge_all_reduces
    boundaries = (2 if pp > 2 else 1) if pp > 1 else 0  # tensors a stage sends (and receives) per micro batch
    tp_bytes = accumulation * (tp_all_reduces * ring_share(tp) + boundaries * ring_share(tp) / 2) * activation
    pp_bytes = accumulation * boundaries * activation / tp
    if pp > 1:  # the tied word embeddings' gradient, between the first and the last stage
        pp_bytes += ring_share(2) * config.vocab_size * config.hidden_size / tp * element_bytes
    weights = parameters_per_rank * element_bytes
    half = ring_share(dp) / 2  # one reduce-scatter or one all-gather
    if zero_stage == 0:
        dp_bytes = 2 * half * weights
    elif zero_stage == 1:
        dp_bytes = 3 * half * weights
    elif zero_stage == 2:
        dp_bytes = (2 * accumulation + 1) * half * weights
    else:
        dp_bytes = 3 * accumulation * half * weights
    return CommVolume(tp=tp_bytes, pp=pp_bytes, dp=dp_bytes)


def estimate(config: ModelConfig, *, seq: int, micro: int, accumulation: int, tp: int, pp: int, dp: int, zero_stage: int,
             element_bytes: int, parameters_per_rank: int, with_nsp: bool, link: Interconnect) -> ScalingEstimate:
    volume = comm_volume(config, seq=seq, micro=micro, accumulation=accumulation, tp=tp, pp=pp, dp=dp,
                         zero_stage=zero_stage, element_bytes=element_bytes, parameters_per_rank=parameters_per_rank)
    world, node = tp * pp * dp, link.gpus_per_node
    crosses = {"TP": tp > node, "DP": tp * dp > node, "PP": pp > 1 and world > node and tp * dp >= node}

    def seconds(kind: str, sent: float) -> float:
        return sent / (1e9 * (link.inter_node_gb_s if crosses[kind] else link.intra_node_gb_s))

    global_batch = micro * accumulation * dp
    flops = global_batch * bert_flops_per_sequence(config.num_layers, config.hidden_size, config.vocab_size, seq,
                                                   MASKED_FRACTION * seq, with_nsp=with_nsp)
    stretch = (accumulation + pp - 1) / accumulation
    compute = flops / world / (link.gpu_tflops * 1e12) * stretch
    return ScalingEstimate(volume=volume, compute_s=compute, bubble=1 - 1 / stretch, tp_s=seconds("TP", volume.tp),
                           pp_s=seconds("PP", volume.pp), dp_s=seconds("DP", volume.dp), crosses_nodes=crosses,
                           tokens_per_step=global_batch * seq)


def estimate_text(est: ScalingEstimate, link: Interconnect) -> str:
    def link_name(kind: str) -> str:
        return f"network {link.inter_node_gb_s:g} GB/s" if est.crosses_nodes[kind] else f"NVLink {link.intra_node_gb_s:g} GB/s"

    def gb(value: float) -> str:
        return f"{value / 1e9:.3g} GB"

    parts = [f"{kind} {gb(sent)} ({link_name(kind)}) {t * 1e3:,.1f} ms" for kind, sent, t in
             (("TP", est.volume.tp, est.tp_s), ("PP", est.volume.pp, est.pp_s), ("DP", est.volume.dp, est.dp_s)) if sent]
    sends = "; ".join(parts) if parts else "nothing (one rank)"
    return (f"each rank sends per step: {sends}\n"
            f"predicted step {est.step_s:.3g} s = compute {est.compute_s:.3g} s ({link.gpu_tflops:g} TFLOP/s per GPU"
            + (f", pipeline bubble {100 * est.bubble:.0f}%" if est.bubble else "")
            + f") + communication, none overlapped (an upper bound): {est.tokens_per_s:,.0f} tokens/s\n"
            f"assumed: {link.gpus_per_node} GPUs per node (--node-gpus), --intra-node-bandwidth, --inter-node-bandwidth, "
            "--gpu-tflops (bert_ds/training/plan/scaling.py)")
