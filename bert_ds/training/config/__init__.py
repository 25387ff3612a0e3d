"""A run's options: the command line of pretrain.py as one `RunConfig` (args.py), the sections
fine-tuning shares (sections.py) and the batch arithmetic both use (batch_plan.py)."""
