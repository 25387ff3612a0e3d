"""bert_ds: distributed BERT pre-training and fine-tuning on megatron-core layers and DeepSpeed."""

import warnings

# megatron-core announces at import that Transformer Engine / Apex are absent and that it uses its
# torch fallbacks. Those fallbacks are what bert_ds uses on CPU; the notice is not actionable.
warnings.filterwarnings("ignore", message=r"Transformer Engine and Apex are not installed")
warnings.filterwarnings("ignore", message=r"Apex is not installed")

__version__ = "0.1.0"
