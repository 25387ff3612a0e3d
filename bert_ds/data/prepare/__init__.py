"""`python -m bert_ds.data.prepare SPEC --output DIR`: a corpus read once into resumable,
checksummed Parquet shards of raw text and a manifest (command.py; the inputs in inputs.py, the
work units and their resume in units.py, progress and parallel units in progress.py). The folder
is read back as a source by data/prepared.py."""
