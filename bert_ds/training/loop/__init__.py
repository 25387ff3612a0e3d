"""The training loop: the Trainer (trainer.py), one optimizer step (steps.py), when to evaluate
(eval_schedule.py), logged metrics (metrics.py), step health (health.py) and test-only faults
(faults.py)."""
