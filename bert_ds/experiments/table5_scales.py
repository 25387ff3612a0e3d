"""How big one run of the Table 5 experiment (experiments/table5.py) is: the scales `smoke` (the
test suite's, on fixtures), `desk` (2 CPU cores) and `paper` (a cluster), each one pre-training
recipe for every objective and one fine-tuning setting for every row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Scale:
    """How big one run of the experiment is."""

    preset: str
    pretrain_steps: int
    global_batch_size: int
    seq_length: int
    lr: float
    warmup_steps: int
    save_interval: int
    finetune_epochs: int
    finetune_batch_size: int
    finetune_lr: float
    max_seq_length: int
    squad_max_seq_length: int
    doc_stride: int
    grid: bool = False
    """Fine-tune with the paper's grid (batch x lr x epochs) instead of one setting."""
    max_train_examples: Optional[int] = None
    """Fine-tune on the first N training features of each task (fine-tuning's --max-train-examples)."""
    phase2_steps: int = 0
    """The last N of the pretrain_steps run at phase2_seq_length (the paper: 10% at 512 tokens), as
    a second run resuming the first's checkpoint, as slurm/pretrain_large_all.sh does; 0: one phase."""
    phase2_seq_length: int = 512
    layer_norm_position: str = "post"
    """Of every model, the randomly initialised "No pre-training" one included."""
    pretrain_options: tuple = ()
    """More pretrain.py options of the recipe (dropout, Adam's beta2, the micro batch...)."""
    phase2_options: tuple = ()
    """pretrain.py options for phase 2 only, after pretrain_options (the later one wins)."""
    ltr_micro_batch_sizes: tuple = ()
    """(phase 1, phase 2) micro batches of the LTR model, after the options above: it predicts every
    position, not 15% of them, so a micro batch's vocabulary logits are ~6.7x MLM's (128 x 128
    tokens of the mini model: 19 GB, killed by the OOM killer on a 24 GB machine). The same global
    batch, in more micro batches."""
    eval_interval: int = 0
    """Held-out evaluation every N pre-training steps (with --eval-data), so that each model's
    held-out masked-LM (LTR: next-token) and NSP accuracy are in the table."""
    finetune_dropout: Optional[float] = None
    """Fine-tuning dropout for every row (a recipe pre-trained without dropout would otherwise
    fine-tune without it too, while the random row has the preset's)."""

    @property
    def pretraining_tokens(self) -> int:
        phase1 = self.pretrain_steps - self.phase2_steps
        return self.global_batch_size * (phase1 * self.seq_length + self.phase2_steps * self.phase2_seq_length)


SCALES = {
    # Minutes, on fixtures: the test suite runs it.
    "smoke": Scale("tiny", 20, 16, 64, 1e-3, 2, 10, 4, 16, 2e-3, 48, 64, 32, max_train_examples=160),
    # About 26 hours of a 2-core CPU, 11.5 of them the LTR model's pre-training (every position
    # predicted: 2.4x the masked LMs' time a token; docs/finetuning.md measures the rates): the desk recipe of docs/pretraining.md
    # (mini, pre-LN, no dropout, batch 128, peak lr 2e-3, Adam beta2 0.98; 7,400 steps at 128
    # tokens, then 600 at 256), so positions up to 256 are trained and SQuAD's windows fit them;
    # fine-tuning on whole training sets with one setting for every row.
    "desk": Scale("mini", 8_000, 128, 128, 2e-3, 300, 400, 3, 32, 1e-4, 128, 256, 128, phase2_steps=600,
                  phase2_seq_length=256, layer_norm_position="pre", eval_interval=400, finetune_dropout=0.1,
                  pretrain_options=("--dropout", "0", "--adam-beta2", "0.98", "--weight-decay", "0.01",
                                    "--micro-batch-size", "128", "--eval-samples", "2000"),
                  # Two micro batches of 64 at 256 tokens: 4.3 GB a process instead of 6.5 GB, so
                  # three phase 2s fit 24 GB side by side (--jobs 3); the same step up to float order.
                  phase2_options=("--micro-batch-size", "64"),
                  # LTR: 5.0 GB at 32 x 128 tokens, 7.7 GB at 64 x 128 (2026-12-07, one run each).
                  ltr_micro_batch_sizes=(32, 16)),
    # The paper's budget for BERT-BASE (1M steps of 256 sequences: 90% at 128 tokens, the last 10%
    # at 512), fine-tuned with its grid: for a cluster (--launch, docs/finetuning.md).
    "paper": Scale("base", 1_000_000, 256, 128, 1e-4, 10_000, 10_000, 3, 32, 2e-5, 128, 384, 128, grid=True,
                   phase2_steps=100_000),
}
