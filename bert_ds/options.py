"""Command-line options generated from a config tree: a dataclass of sections (model, data,
optim, ...), each a dataclass whose fields are the settings. One field, one option: its help the
field's docstring, its default the field's default, listed under its section. What a field needs
beyond its type (a flag of another name, choices, `auto`) sits in `field(metadata=option(...))`
next to it, so adding a setting is adding a field. Option names stay flat (`--lr`, not
`--optim.lr`): leaf names are unique across a tree, and `flat()` gives the records that shape.

Types come from the annotations: int/float/str take one value, `Optional[X]` the same with a
default of None, `list[str]` one or more values, bool a switch (`--name` turns it on; a field
that defaults to True gets `--no-name`, or the flag its metadata names; `Optional[bool]`
defaulting to None gets `--name/--no-name`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import sys
import typing
from typing import Any, Callable, Optional


def option(*, flag: Optional[str] = None, choices=None, parse: Optional[Callable[[str], Any]] = None,
           nargs=None, const=None, parser_default: Any = dataclasses.MISSING) -> dict:
    """Field metadata for `add_options`: `flag` (another option name), `choices`, `parse` (a value
    parser instead of the annotated type), `nargs`/`const` (argparse's) and `parser_default`
    (what argparse stores when the option is absent, e.g. None for a default that the preset
    decides)."""
    return dict(flag=flag, choices=choices, parse=parse, nargs=nargs, const=const, parser_default=parser_default)


@functools.lru_cache(maxsize=None)
def field_docs(cls) -> dict[str, str]:
    """{field name: its docstring (the string literal right after it)} for a dataclass and its bases
    ({} for a class without a source file: a dataclass made by make_dataclass)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        source = inspect.getsourcefile(klass) if dataclasses.is_dataclass(klass) else None
        if source:
            docs.update(_module_field_docs(source).get(klass.__qualname__, {}))
    return docs


@functools.lru_cache(maxsize=None)
def _module_field_docs(filename: str) -> dict[str, dict[str, str]]:
    """{class qualname: {field: docstring}} for every class in one source file, parsed once: every
    entrypoint (each rank of a job) builds its parser at start, and inspect.getsource parses the
    whole module again for each class it is asked for (~50 ms a start for a job's dozen sections).
    Two classes of one qualified name (under if/else): the first, as inspect finds it."""
    found: dict[str, dict[str, str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                found.setdefault(name, {
                    field.target.id: " ".join(following.value.value.split())
                    for field, following in zip(child.body, child.body[1:])
                    if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                        and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                        and isinstance(following.value.value, str))})
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a class defined in a function
                visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):  # if/try/with/for blocks
                visit(child, prefix)  # (expressions hold no class: not walked)

    try:
        with open(filename, encoding="utf-8") as source:
            visit(ast.parse(source.read()), "")
    except OSError:
        return {}  # no readable source (a zipped install): options without help, not a failed start
    return found


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _plain_type(annotation) -> tuple[type, bool]:
    """(the value type, whether the field takes a list) of an annotation such as Optional[list[str]]."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return _plain_type(args[0])
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], True
    return annotation, False


def add_options(parser: argparse.ArgumentParser, tree) -> None:
    """One option per leaf field of `tree`, a dataclass whose fields are the sections of a job
    (each itself a dataclass): one argument group per section, titled by the section's name and
    described by its docstring, so --help lists each setting under its part of the job. Leaf
    names are the options' destinations, so they must be unique across the sections."""
    hints, docs, seen = typing.get_type_hints(tree), field_docs(tree), {}
    for section in dataclasses.fields(tree):
        kind = hints[section.name]
        group = parser.add_argument_group(section.name, docs.get(section.name))
        leaf_hints, leaf_docs = typing.get_type_hints(kind), field_docs(kind)
        for leaf in dataclasses.fields(kind):
            if leaf.name in seen:
                raise TypeError(f"{tree.__name__}: {leaf.name!r} is in both {seen[leaf.name]} and {section.name}")
            seen[leaf.name] = section.name
            _add(group, leaf, leaf_hints[leaf.name], leaf_docs.get(leaf.name, ""))


def sections(tree) -> dict[str, type]:
    """{section name: its dataclass} of a config tree."""
    hints = typing.get_type_hints(tree)
    return {section.name: hints[section.name] for section in dataclasses.fields(tree)}


def from_namespace(tree, values: dict[str, Any]):
    """The config tree `tree` built from flat {leaf name: value} (parsed options, a saved record)."""
    return tree(**{name: kind(**{leaf.name: values[leaf.name] for leaf in dataclasses.fields(kind) if leaf.name in values})
                   for name, kind in sections(tree).items()})


def flat(config) -> dict[str, Any]:
    """{leaf name: value} of a config tree: the shape of the saved records (checkpoints, plan
    JSON), which name each setting as its option does."""
    return {leaf.name: getattr(getattr(config, name), leaf.name)
            for name in sections(type(config)) for leaf in dataclasses.fields(getattr(config, name))}


def _add(group, field: dataclasses.Field, annotation, doc: str) -> None:
    meta = {**option(), **field.metadata}
    flag = meta["flag"] or "--" + field.name.replace("_", "-")
    default = _default(field) if meta["parser_default"] is dataclasses.MISSING else meta["parser_default"]
    text = doc.replace("%", "%%")  # argparse formats help with %-placeholders
    kind, many = _plain_type(annotation)
    if kind is bool and _default(field) is None:  # three states: on, off, or decided later
        group.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        return
    if kind is bool and meta["nargs"] is None:
        on = not _default(field)
        flag = meta["flag"] or ("--" if on else "--no-") + field.name.replace("_", "-")
        group.add_argument(flag, dest=field.name, action="store_true" if on else "store_false", default=default, help=text)
        return
    kwargs = dict(dest=field.name, default=default, help=text, type=meta["parse"] or kind)
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        kwargs["required"] = True
    if meta["choices"] is not None:
        kwargs["choices"] = meta["choices"]
    nargs = meta["nargs"] or ("+" if many else None)
    if nargs is not None:
        kwargs["nargs"] = nargs
    if meta["const"] is not None:
        kwargs["const"] = meta["const"]
    group.add_argument(flag, **kwargs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except for switches and None (the docstring says what
    None means, and a switch's name says what it turns on or off)."""

    def _get_help_string(self, action):
        if action.default is None or action.nargs == 0 or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def refuse_empty_values(parser: argparse.ArgumentParser, argv: Optional[list[str]]) -> None:
    """Python 3.11's argparse reads `--option=--` as an empty list instead of a missing value."""
    for token in sys.argv[1:] if argv is None else argv:
        if token.startswith("--") and token.endswith("=--"):
            parser.error(f"argument {token[:-3]}: expected one argument")
