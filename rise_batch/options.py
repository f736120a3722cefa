"""One source for each option: a config dataclass field carries its default, type, help and flag, and the CLI's flags
and the docs' option tables are both made from it.

A field declares itself with `option(default, help=...)` (the flag's name, choices and metavar where they differ
from the field's); a command lists which keys it offers, in which --help section (a `Layout`), and `add_layout` turns
that into argparse arguments while `markdown_table` turns it into the docs' table. So a default is written once, on
the field: the help text shows it, the docs show it, and the YAML key and the flag cannot drift apart.

Flags of config-backed commands (`structure`, `run`) default to None, meaning "not given: take the config file's
value, else the field's"; commands without a config file (`judge`) take the field's default directly. A boolean
field is a switch away from its default: `--x` when it defaults to False, `--no-x` when it defaults to True.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, get_type_hints

from rise_batch.option_paths import PathKind, path_argument

_MISSING: Any = dataclasses.MISSING


def option(
    default: Any = _MISSING,
    *,
    help: str | Callable[[], str],
    flag: str | None = None,
    choices: Iterable[str] | Callable[[], Iterable[str]] | None = None,
    metavar: str | None = None,
    shown: str | None = None,
    default_factory: Callable[[], Any] = _MISSING,
    repeatable: bool = False,
    parse: Callable[[str], Any] | None = None,
    path: PathKind | None = None,
) -> Any:
    """A dataclass field documented as an option.

    help: a string, or a function giving one when the parser or the docs are built (a list read off a registry);
    flag: the flag when it is not `--<name>` (`--no-<name>` for a field defaulting to True); choices: a list, or a
    function giving one when the parser is built (a registry that may grow); shown: the default as --help and the docs
    say it when the value alone does not (None meaning "the model's", a default that depends on another key);
    repeatable: a list field given once per value (`--query A --query B`); parse: the function argparse converts the
    value with, where it is not the field's int or float; path: what a path option takes (`URI`, or `local(why)`:
    a storage URI refused, for the CLI's flags and the config files alike, see option_paths.py). A field no command
    offers as a flag is a config-file key; the docs list it all the same."""
    meta = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "metavar": metavar,
        "shown": shown,
        "repeatable": repeatable,
        "parse": parse,
        "path": path,
    }
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def same_as(cls: type, name: str, **changes: Any) -> Any:
    """A field like `cls`'s `name` (its default and metadata), with `changes` (default=, help=, ...): a section that
    mirrors another's settings (the judge's LLM settings) says so instead of copying their defaults and help."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = dict(f.metadata) | {k: v for k, v in changes.items() if k != "default"}
    return dataclasses.field(default=changes.get("default", f.default), metadata=meta)


class Option(NamedTuple):
    """One leaf setting of a config dataclass, nested sections flattened to dotted keys (`llm.rpm`)."""

    key: str
    dest: str  # the argparse dest: the key with `_` for `.` (`llm_rpm`), which the config loaders split again
    type: type
    default: Any  # the effective default: read from the root's default instance (RunConfig's llm has its own)
    flag: str
    help: str | Callable[[], str]
    choices: Any
    metavar: str | None
    shown: str | None
    repeatable: bool = False
    parse: Any = None
    path: PathKind | None = None


def _base(hint: Any) -> Any:
    """`int | None` -> int; `list[str]` -> str (a repeatable option's values)."""
    args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
    return args[0] if args else hint


def options(cls: type, prefix: str = "", defaults: Any = None) -> dict[str, Option]:
    """Every documented leaf field of `cls`, by dotted key, in declaration order."""
    defaults = cls() if defaults is None else defaults
    hints = get_type_hints(cls)
    found: dict[str, Option] = {}
    for f in dataclasses.fields(cls):
        key, value, hint = prefix + f.name, getattr(defaults, f.name), _base(hints[f.name])
        if dataclasses.is_dataclass(hint):
            found.update(options(hint, f"{key}.", value))
            continue
        if "help" not in f.metadata:
            continue
        m = f.metadata
        flag = m["flag"] or ("--no-" if value is True else "--") + f.name.replace("_", "-")
        found[key] = Option(
            key,
            key.replace(".", "_"),
            hint,
            value,
            flag,
            m["help"],
            m["choices"],
            m["metavar"],
            m["shown"],
            m.get("repeatable", False),
            m.get("parse"),
            m.get("path"),
        )
    return found


def shown_default(opt: Option) -> str | None:
    """The default as a person reads it: 2,000,000; 120 (not 120.0); none for a switch or an empty value."""
    if opt.shown is not None:
        return opt.shown
    value = opt.default
    if value is None or value == "" or value == [] or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:g}"
    return str(value)


def resolve_help(help: str | Callable[[], str]) -> str:
    """A help text, made now when it is read off a registry that may have grown since import."""
    return help() if callable(help) else help


def help_text(opt: Option, help: str | None = None, shown: str | None = None, required: bool = False) -> str:
    """The option's help with its default appended (none for a required flag), `%` escaped for argparse."""
    text = resolve_help(help or opt.help)
    if shown or opt.shown:  # a description, not a value: "(default: the model's)"
        text += f" (default: {shown or opt.shown})"
    elif (default := shown_default(opt)) and not required:
        text += f" (default {default})"
    return text.replace("%", "%%")


class Entry(NamedTuple):
    """A key a command offers, with what this command says differently (its own flag, help or shown default)."""

    key: str
    flag: str | None = None
    help: str | Callable[[], str] | None = None
    shown: str | None = None
    required: bool = False
    dest: str | None = None  # where a command reads it under another name than the key's


class Section(NamedTuple):
    """One --help section: its title (None: the parser's own options) and its keys."""

    title: str | None
    keys: tuple[str | Entry, ...]


class Layout(NamedTuple):
    """What a command offers of a config dataclass and how --help groups it. from_file: flags default to None (the
    config file's value, else the field's); else to the field's default."""

    cls: type
    sections: tuple[Section, ...]
    from_file: bool = True

    def entries(self) -> list[tuple[str | None, Entry]]:
        return [(s.title, k if isinstance(k, Entry) else Entry(k)) for s in self.sections for k in s.keys]


def add_option(container: argparse._ActionsContainer, opt: Option, entry: Entry, from_file: bool) -> None:
    """One argparse argument for `opt`, as `entry` asks."""
    default = None if from_file or entry.required else opt.default
    kwargs: dict[str, Any] = {
        "dest": entry.dest or opt.dest,
        "help": help_text(opt, entry.help, entry.shown, entry.required),
    }
    if opt.type is bool:
        kwargs |= {"action": "store_false" if opt.default else "store_true", "default": default}
    elif opt.repeatable:
        kwargs |= {"action": "append", "default": default}
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
    else:
        kwargs["default"] = default
        if opt.parse is not None or opt.type in (int, float):
            kwargs["type"] = opt.parse or opt.type
        if opt.choices is not None:
            kwargs["choices"] = list(opt.choices() if callable(opt.choices) else opt.choices)
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
    if entry.required:
        kwargs["required"] = True
    path_argument(container, entry.flag or opt.flag, path=opt.path, **kwargs)


def add_layout(
    parser: argparse.ArgumentParser, layout: Layout, only: Iterable[str | None] | None = None
) -> dict[str | None, argparse._ActionsContainer]:
    """The layout's flags on `parser`, each section in its argument group (created once); `only`: these sections.
    Returns the containers by title, for a command's own flags to join a section."""
    opts = options(layout.cls)
    groups: dict[str | None, argparse._ActionsContainer] = {None: parser}
    wanted = None if only is None else set(only)
    for title, entry in layout.entries():
        if wanted is not None and title not in wanted:
            continue
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        add_option(groups[title], opts[entry.key], entry, layout.from_file)
    return groups


def markdown_table(layout: Layout, key_prefix: str | None = "") -> str:
    """The layout's options as a Markdown table (flag, config key, type, default, help), then the config-file keys
    without a flag; key_prefix: where the keys sit in a config file (`judge.` in a sweep), None for a command that
    has no config file (no key column)."""
    opts = options(layout.cls)
    keyed = key_prefix is not None
    head = ["flag", "config key", "type", "default", "help"] if keyed else ["flag", "type", "default", "help"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    offered = set()
    for _, entry in layout.entries():
        opt = opts[entry.key]
        offered.add(entry.key)
        shown = entry.shown
        if entry.required:
            shown = f"required flag (config `{shown_default(opt)}`)" if keyed else "required"
        rows.append(_row(opt, f"`{entry.flag or opt.flag}`", key_prefix, entry.help, shown))
    for key, opt in opts.items():
        if key not in offered:
            rows.append(_row(opt, "(config file)", key_prefix, None, None))
    return "\n".join(rows) + "\n"


def _row(opt: Option, flag: str, key_prefix: str | None, help: str | None, shown: str | None) -> str:
    """One table row: a value default in code (`500`), a described one in words (the model's)."""
    if shown is not None or opt.shown is not None:
        default = shown if shown is not None else opt.shown
    elif isinstance(opt.default, bool):
        default = f"`{str(opt.default).lower()}`"
    else:
        default = f"`{value}`" if (value := shown_default(opt)) else ""
    choices = opt.choices() if callable(opt.choices) else opt.choices
    kind = r" \| ".join(f"`{c}`" for c in choices) if choices else _kind_name(opt)
    if opt.repeatable:
        kind += ", repeatable"
    key = [] if key_prefix is None else [f"`{key_prefix}{opt.key}`"]
    cells = [flag, *key, kind, default, resolve_help(help or opt.help).replace("|", "\\|")]
    return "| " + " | ".join(cells) + " |"


def _kind_name(opt: Option) -> str:
    """The type column: a path option says whether it takes a storage URI."""
    if opt.path is None:
        return opt.type.__name__
    return "path or URI" if opt.path.kind == "uri" else "local path"
