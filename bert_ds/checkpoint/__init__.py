"""Checkpoints: Hugging Face interop (hf_weights); ZeRO save/resume arrives with pre-training."""
