"""Helpers the tests share: running entrypoints and ranks (helpers.py), fixtures in the real
formats (glue_fixtures.py, task_fixtures.py, hub_fixtures.py), golden records (golden.py), a real
Slurm cluster (slurm_cluster.py), layout moves (layouts.py), fuzzing settings (fuzzing.py)."""
