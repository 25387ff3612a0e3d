"""Checkpoint tools.

    python -m bert_ds.checkpoint import-hf SRC OUT [--seed N]   Hugging Face BERT folder -> portable
    python -m bert_ds.checkpoint export-hf CKPT OUT             portable or ZeRO checkpoint -> Hugging Face
    python -m bert_ds.checkpoint portable CKPT OUT              ZeRO checkpoint (any layout) -> portable

A user error (a checkpoint, tokenizer or config that does not fit) prints one `error: ...` line on
stderr and exits 2. Each subcommand is one row of COMMANDS: (help, add its arguments, run it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from bert_ds.errors import USER_ERRORS, report



def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="Hugging Face folder: config.json, model.safetensors (or .bin), vocab.txt")
    parser.add_argument("out", help="portable checkpoint folder to write")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the BERT init for heads the source lacks")


def _run_import(args: argparse.Namespace) -> None:
    from bert_ds.checkpoint.hf_import import import_hf

    report = import_hf(args.src, args.out, seed=args.seed)
    config = report.model_config
    print(
        f"imported {report.architecture} from {report.weights_file} ({', '.join(report.source_dtypes)}): "
        f"{config.num_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, "
        f"vocab {config.vocab_size}; {len(report.loaded)} tensors"
    )
    if report.initialised:
        print(f"initialised (seed {args.seed}), not in the source: {', '.join(report.initialised)}")
    if report.ignored_buffers:
        print(f"ignored buffers: {', '.join(report.ignored_buffers)}")
    print(f"wrote {report.path}")


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="portable folder (portable.json) or ZeRO pre-training checkpoint folder")
    parser.add_argument("out", help="Hugging Face folder to write")


def _run_export(args: argparse.Namespace) -> None:
    import json

    from bert_ds.checkpoint.hf_export import export_hf_path

    notes: list[str] = []
    folder = export_hf_path(args.checkpoint, args.out, notes)
    config = json.loads((folder / "config.json").read_text())
    print(f"exported {config['architectures'][0]} (vocab {config['vocab_size']}) to {folder}")
    for note in notes:
        print(f"note: {note}")


def _portable_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="ZeRO checkpoint: a --save folder (its latest) or one step folder")
    parser.add_argument("out", help="portable checkpoint folder to write")
    parser.add_argument("--weights-only", action="store_true", help="leave out optimizer state and progress")


def _run_portable(args: argparse.Namespace) -> None:
    from bert_ds.checkpoint.convert import zero_to_portable

    folder = zero_to_portable(args.checkpoint, args.out, optimizer=not args.weights_only)
    kind = "weights" if args.weights_only else "weights, Adam moments, step, LR schedule and data positions"
    print(f"wrote {folder} ({kind}); `--load {folder}` resumes it on any layout")


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], None]]] = {
    "import-hf": ("import a Hugging Face BERT folder as a portable checkpoint", _import_arguments, _run_import),
    "export-hf": ("export a checkpoint as a Hugging Face BERT folder", _export_arguments, _run_export),
    "portable": ("convert a ZeRO checkpoint to the layout-free portable form", _portable_arguments, _run_portable),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_ds.checkpoint", description="bert_ds checkpoint tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        add_arguments(command)
        command.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (*USER_ERRORS, OSError) as error:
        return report(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
