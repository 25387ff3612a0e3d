"""A local or remote source's records by number, so a loader shard reads only its own chunks:
the index and epochs (index.py), JSON Lines and JSON arrays (json_lines.py), Parquet row groups
(parquet.py)."""
