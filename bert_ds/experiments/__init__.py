"""Experiments that rerun the paper's comparisons end to end (table5.py: the pre-training tasks ablation)."""
