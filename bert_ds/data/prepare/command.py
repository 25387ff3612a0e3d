"""`python -m bert_ds.data.prepare SPEC --output DIR`: read a corpus once and write it as Parquet
shards of raw records with a manifest, a folder that `--data NAME=DIR` then reads at ~1/K per
loader shard on nodes without internet.

SPEC is one `--data` source: a hub dataset `hf:ID[:CONFIG][@REVISION]` (read by row group from
its Parquet files, at the commit the revision stands for when the folder is started), or local
files (`.txt`, `.jsonl`/`.json`, `.parquet`; checked record by record first). The shards keep
raw text, not token ids, so the tokenizer and the sequence length stay free choices:

    shard-UUUUU-KKKK.parquet   columns text (+ id, title where the source has them); row groups
                               of at most 1,000 rows (a multiple of N for a `sentences:N` layout,
                               so a document never straddles two); at most --shard-size bytes
    manifest.json              source, revision and commit, the layout, per shard its records,
                               bytes, row groups, words, characters and sha256; the totals; the
                               command that made it. Written last: a folder without a complete
                               manifest is refused by the loader.

Killed at any point, the same command continues after the last complete shard
(data/prepare/units.py) and writes the bytes an uninterrupted run writes. A folder that holds
other files is refused. `--num-proc N` writes N units at once (where the source has several
files); the output does not depend on N.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

from bert_ds.data.prepare.inputs import Inputs, saved_commit, write_inputs_unit
from bert_ds.data.prepare.units import STATE_DIR, Settings, check_settings, plan_units, read_unit_state
from bert_ds.data.prepared import EXPECTED_RECORDS, FORMAT, MANIFEST, VERSION, shortfall_warning
from bert_ds.errors import USER_ERRORS, DataError, report

DEFAULT_SHARD_BYTES = 256 * 2**20
MAX_ROW_GROUP_ROWS = 1000
_SIZE = re.compile(r"^\s*([0-9.]+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """`256MiB`, `1GiB`, `500MB`, `1048576` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256MiB, 1GiB, 500MB)")
    unit = (match.group(2) or "B").upper().rstrip("B") or "B"
    scale = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[unit]
    value = int(float(match.group(1)) * scale)
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


def _default_row_group_rows(group: int) -> int:
    """At most 1,000 rows, a whole number of the layout's documents (sentences:256 -> 768)."""
    return max(group, MAX_ROW_GROUP_ROWS // group * group)


def _check_folder(output: Path, spec: str) -> str:
    """'new', 'resume' or 'done'; a DataError for a folder that holds anything else (another
    source's prepared folder included)."""
    if not output.exists():
        return "new"
    if not output.is_dir():
        raise DataError(f"--output {output} is a file, not a folder.")
    if (output / MANIFEST).is_file():
        try:
            manifest = json.loads((output / MANIFEST).read_text())
        except ValueError:
            manifest = {}
        if manifest.get("format") == FORMAT and manifest.get("complete"):
            if manifest.get("spec") != spec:
                raise DataError(f"--output {output} holds a prepared {manifest.get('spec')!r}, not {spec!r}; choose "
                                "another folder.")
            return "done"
    if (output / STATE_DIR / "settings.json").is_file():
        return "resume"
    entries = sorted(p.name for p in output.iterdir())
    if entries:
        raise DataError(f"--output {output} holds files that bert_ds.data.prepare did not write ({', '.join(entries[:3])}"
                        f"{', ...' if len(entries) > 3 else ''}); choose an empty or new folder.")
    return "new"


def prepare(args: argparse.Namespace, command: str) -> dict:
    output = Path(args.output)
    if _check_folder(output, args.spec) == "done":
        manifest = json.loads((output / MANIFEST).read_text())
        print(f"bert_ds: {output} is prepared already ({manifest['records']:,} records in {len(manifest['shards'])} "
              f"shards); nothing to do", file=sys.stderr)
        return manifest
    inputs = Inputs(args.spec, args.txt_documents, saved_commit(output))  # a resumed folder keeps its commit
    output.mkdir(parents=True, exist_ok=True)
    rows = args.row_group_rows or _default_row_group_rows(inputs.layout.group)
    settings = Settings(args.shard_size, rows, inputs.columns)
    source_meta = dict(inputs.meta, inputs=[[name, size] for name, size in zip(inputs.names, inputs.sizes)])
    problem = check_settings(output, settings, source_meta)
    if problem:
        raise DataError(f"{problem}: rerun with the settings it was started with, or prepare into a new folder.")
    units = plan_units(inputs.sizes, inputs.counts, args.shard_size)
    shards = _run_units(args, inputs, units, settings, output)
    manifest = _manifest(inputs, settings, shards, command)
    staging = output / (MANIFEST + ".partial")
    staging.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(staging, output / MANIFEST)
    shutil.rmtree(output / STATE_DIR, ignore_errors=True)
    return manifest


def _run_units(args, inputs: Inputs, units, settings: Settings, output: Path) -> list[dict]:
    from bert_ds.data.prepare.progress import Progress

    done = sum(sum(s["records"] for s in read_unit_state(output, u.index)["shards"]) for u in units)
    total = None if None in inputs.counts else sum(inputs.counts)  # JSON Lines: counted as they are read
    with Progress(total, done) as progress:
        workers = min(args.num_proc, len(units))
        if workers <= 1:
            return [shard for unit in units for shard in write_inputs_unit(inputs, unit, settings, output, progress.add)]
        from bert_ds.data.prepare.progress import run_parallel

        results = run_parallel(workers, [(vars(args), unit, settings, str(output)) for unit in units], progress)
        return [shard for unit in units for shard in results[unit.index]]


def _manifest(inputs: Inputs, settings: Settings, shards: list[dict], command: str) -> dict:
    from bert_ds import __version__

    totals = {key: sum(shard[key] for shard in shards) for key in ("records", "bytes", "words", "characters")}
    manifest = dict(format=FORMAT, version=VERSION, complete=True, **inputs.meta, **totals,
                    columns=list(settings.columns), row_group_rows=settings.row_group_rows,
                    shard_bytes=settings.shard_bytes, shards=shards, command=command, bert_ds=__version__,
                    created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    expected = EXPECTED_RECORDS.get((manifest.get("hub_id"), manifest.get("config")))
    if expected:
        manifest["expected_records"] = expected
    return manifest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bert_ds.data.prepare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="one --data source: hf:ID[:CONFIG][@REVISION] or local files, [#LAYOUT] allowed")
    parser.add_argument("--output", required=True, help="folder for the shards and manifest.json (new, empty, or "
                                                        "one this command started: it continues)")
    parser.add_argument("--shard-size", type=parse_size, default=DEFAULT_SHARD_BYTES,
                        help="most bytes per shard, e.g. 256MiB (default), 1GiB")
    parser.add_argument("--row-group-rows", type=int, default=None,
                        help="rows per Parquet row group (default: 1000, a multiple of N for sentences:N)")
    parser.add_argument("--num-proc", type=int, default=1, help="processes writing units at once (default 1)")
    parser.add_argument("--txt-documents", choices=("file", "blank_line"), default="file",
                        help=".txt sources: one document per file (default) or per blank-line-separated block")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.num_proc < 1 or (args.row_group_rows is not None and args.row_group_rows < 1):
        return report(DataError("--num-proc and --row-group-rows must be at least 1."))
    command = shlex.join(["python", "-m", "bert_ds.data.prepare", *argv])
    started = time.perf_counter()
    try:
        manifest = prepare(args, command)
    except USER_ERRORS as error:
        return report(error)
    except KeyboardInterrupt:
        print(f"\nbert_ds: interrupted; run the same command again to continue: {command}", file=sys.stderr)
        return 130
    warning = shortfall_warning(manifest["name"], manifest)
    if warning:
        print(warning, file=sys.stderr)
    print(f"bert_ds: {args.output}: {manifest['records']:,} records, {manifest['words']:,} words, "
          f"{len(manifest['shards'])} shard(s), {manifest['bytes'] / 2**20:,.1f} MiB, layout {manifest['layout']} "
          f"({time.perf_counter() - started:,.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
