"""Pre-training: options (config/), the launch plan resolved before anything starts (plan/), the
DeepSpeed engine (engine/), the training loop (loop/), held-out evaluation (evaluation.py), and
the job's phases in order (job.py)."""
