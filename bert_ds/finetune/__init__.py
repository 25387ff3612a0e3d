"""Fine-tuning: one file per task (glue.py, squad.py, swag.py, ner.py: each a `FinetuneTask` of
task.py and its entrypoint), the shared core (core.py: model, engine, epochs, grid and restarts),
options (args.py), plan (plan.py), starting point (starting_point.py), batches, metrics and
outputs; the task data readers and features are in data/."""
