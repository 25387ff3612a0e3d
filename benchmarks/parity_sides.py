"""The two sides of the learning-parity benchmark (benchmarks/learning_parity.py), each stepped on
the same batch and scored on the same held-out set by the same function.

  bert_ds: the real engine (training/job.py setup_engine: DeepSpeed, fused AdamW, our loss and
           warm-up + linear decay schedule), stepped by training/loop/steps.py plain_step.
  hf:      transformers.BertForPreTraining (SDPA attention) with its config from bert_ds's own
           mapping (checkpoint/hf_export.py hf_config); BertForPreTraining's loss (MLM
           cross-entropy over the masked positions + NSP cross-entropy); torch AdamW with the
           Hugging Face Trainer's groups (no decay on biases and LayerNorm), the same betas, eps and
           weight decay; transformers' get_linear_schedule_with_warmup; clipping at 1.0; bf16 as
           `torch.autocast`.

Each side's training state (`state_dict`/`load_state_dict` for Hugging Face's; the engine itself
for bert_ds's) is what benchmarks/parity_state.py saves so that a long pair can stop and go on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class BertDsSide:
    name = "bert_ds"

    def __init__(self, run, model_config, layout, initial_hf_state=None):
        from bert_ds.checkpoint.hf_weights import hf_to_bert_ds
        from bert_ds.training import job

        self.run, self.model_config, self.layout = run, model_config, layout
        self.engine, self.model, _ = job.setup_engine(run, self.model_config, self.layout)
        if initial_hf_state is not None:
            self.start_from(hf_to_bert_ds(initial_hf_state, self.model_config))

    @torch.no_grad()
    def start_from(self, weights: dict) -> None:
        """Before the first step: `weights` (fp32, bert_ds's names) as the initial weights. At fp32
        the engine's parameters are the optimizer's; in bf16 the first step starts from the fp32
        masters (training/engine/master_weights.py), so they are set too, or it would put bert_ds's
        own initial draw back."""
        from bert_ds.training.engine.master_weights import MasterWeightsOptimizer

        self.model.load_state_dict(weights, strict=True)
        masters = self.engine.optimizer
        if isinstance(masters, MasterWeightsOptimizer):
            # Its own loading path: each master from its parameter's fp32 value, then the bf16 weights from them.
            names = {id(param): name for name, param in self.model.named_parameters()}
            masters.load_state_dict({"fp32_groups": [[weights[names[id(param)]] for param in group] for group in masters.fp16_groups]},
                                    load_optimizer_states=False)
        elif any(param.dtype != torch.float32 for param in self.model.parameters()):
            raise SystemExit("error: the benchmark sets the initial weights of an fp32 engine or of one with "
                             "bert_ds's own fp32 masters (one process), not of DeepSpeed's bf16 optimizer")

    def step(self, batch: dict) -> tuple[float, float, float]:
        from bert_ds.training.loop.steps import StepResult, plain_step

        lr = self.engine.get_lr()[0]
        result = StepResult.from_tensor(plain_step(self.engine, iter([batch]), 1, self.layout).as_tensor())
        return result.mlm_loss, result.nsp_loss, lr

    def evaluate(self, eval_set) -> tuple[float, float, float]:
        from bert_ds.training.evaluation import evaluate

        result = evaluate(self.engine, self.model, eval_set, self.layout)
        return result.mlm_accuracy, result.nsp_accuracy, result.mlm_loss


class HuggingFaceSide:
    name = "hf"

    def __init__(self, run, model_config, layout, tokenizer, precision: str, seed: int):
        import transformers

        from bert_ds.checkpoint.hf_weights import hf_config

        config = hf_config(model_config, "BertForPreTraining", tokenizer.pad_id, attn_implementation="sdpa")
        torch.manual_seed(seed)
        self.model = transformers.BertForPreTraining(config).to(layout.device).train()
        self.layout, self.precision, self.vocab = layout, precision, config.vocab_size
        settings = run.optim.settings()
        # The Hugging Face Trainer's groups: no weight decay on biases and LayerNorm weights.
        exempt = [p for n, p in self.model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
        decay = [p for n, p in self.model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
        groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": exempt, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, eps=settings.eps, foreach=True)
        self.scheduler = transformers.get_linear_schedule_with_warmup(self.optimizer, settings.warmup_steps, settings.total_steps)

    def state_dict(self) -> dict:
        """Weights, AdamW moments and the schedule's position: what resuming this side needs."""
        return dict(model=self.model.state_dict(), optimizer=self.optimizer.state_dict(), scheduler=self.scheduler.state_dict())

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"], strict=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def initial_state(self) -> dict:
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def losses(self, batch: dict, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
        """BertForPreTraining's own MLM and NSP losses of `batch` (labels -100 outside the masked
        positions), its forward in `precision` (bf16: autocast)."""
        from bert_ds.runtime.device import autocast

        with autocast(precision):
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             token_type_ids=batch["token_type_ids"])
        labels = batch["labels"].masked_fill(~batch["loss_mask"], -100)
        mlm = F.cross_entropy(out.prediction_logits.float().view(-1, self.vocab), labels.view(-1), ignore_index=-100)
        return mlm, F.cross_entropy(out.seq_relationship_logits.float(), batch["next_sentence_label"])

    def step(self, batch: dict) -> tuple[float, float, float]:
        lr = self.scheduler.get_last_lr()[0]
        mlm, nsp = self.losses(batch, self.precision)
        (mlm + nsp).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return mlm.item(), nsp.item(), lr

    @torch.no_grad()
    def evaluate(self, eval_set) -> tuple[float, float, float]:
        from bert_ds.runtime.device import autocast
        from bert_ds.model.loss import evaluation_sums
        from bert_ds.runtime.device import to_device

        self.model.eval()
        total = 0
        for batch in eval_set.batches:
            batch = to_device(batch, self.layout.device)
            mask = batch["loss_mask"]
            with autocast(self.precision):
                out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 token_type_ids=batch["token_type_ids"])
            total = total + evaluation_sums(out.prediction_logits[mask], batch["labels"][mask], out.seq_relationship_logits,
                                            batch["next_sentence_label"], tp_group=self.layout.tp_group)
        self.model.train()
        mlm_loss, mlm_correct, mlm_count, _, nsp_correct, nsp_count = total.tolist()
        return mlm_correct / mlm_count, nsp_correct / nsp_count, mlm_loss / mlm_count
