"""Checkpoints: ZeRO save/resume (zero), the layout-free portable form (portable, portable_load,
convert) and Hugging Face interop (hf_weights, hf_import, hf_export); CLI in __main__."""
