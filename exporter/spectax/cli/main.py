"""spectax: is speculative decoding paying for itself on each endpoint? `spectax demo` first."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from spectax import __version__, logs
from spectax.config import ConfigError
from spectax.store import StoreError
from spectax.store.schema import SchemaMismatch
from spectax.webconfig import WebConfigError

# What a command may raise for the user to read: the prefix of its line on stderr and the
# exit status (2: fix the files or the schema; 1: the store failed). The first match wins.
FAILURES: tuple[tuple[type[Exception], str, int], ...] = (
    (ConfigError, "invalid configuration ", 2),
    (WebConfigError, "invalid web configuration ", 2),
    (SchemaMismatch, "", 2),
    (StoreError, "", 1),
)


# Each command, in the order --help lists them: its module under spectax.cli and the function
# there that adds its parser. Only the module of the command given is imported: `spectax
# run` does without report, assess, model and the others (33 modules, 1.3 MiB of a daemon's
# RSS; bench/README, issue 31).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "add_parser"),
    "demo": ("run", "add_demo_parser"),
    "db": ("db", "add_parser"),
    "export": ("export", "add_parser"),
    "report": ("report", "add_report_parser"),
    "billing": ("billing", "add_parser"),
    "backfill": ("backfill", "add_parser"),
    "check-config": ("check_config", "add_parser"),
    "assess": ("assess", "add_parser"),
    "model": ("model", "add_parser"),
}
_VALUED_FLAGS = frozenset({"--log-level", "--log.level", "--log-format", "--log.format"})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser(_command_named(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    try:
        return int(args.func(args))
    except tuple(kind for kind, _, _ in FAILURES) as exc:
        prefix, status = next((p, s) for kind, p, s in FAILURES if isinstance(exc, kind))
        print(f"spectax: {prefix}{exc}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `spectax assess ... | head`: the reader has what it wanted. Point stdout at
        # /dev/null so that the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell's own commands report it


def _command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs, when its words say it before any option but the global
    flags; None when they do not (--help, --version, no command, a mistake): then every
    command's parser is built, and argparse answers as it always did."""
    words = iter(argv)
    for word in words:
        if word in _VALUED_FLAGS:
            next(words, None)  # the flag's value
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
        elif word.partition("=")[0] not in _VALUED_FLAGS:
            return None
    return None


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with `command`, that command's alone (its module is the
    only one imported); without, every command's."""
    parser = argparse.ArgumentParser(prog="spectax", description=__doc__, allow_abbrev=False)
    _add_global_flags(parser, None)
    commands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND"
    )
    for module, add in (COMMANDS[name] for name in ([command] if command else COMMANDS)):
        getattr(importlib.import_module(f"spectax.cli.{module}"), add)(commands)
    for sub in _commands(parser):
        sub.allow_abbrev = False  # `--acceptance` must never pass for `--acceptance-length`
        _add_global_flags(sub, argparse.SUPPRESS)
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, default: str | None) -> None:
    """--version, --log-level and --log-format, with Prometheus' own spellings (`--log.level`,
    `--log.format`) as aliases: an exporter's operator types those. On every command too
    (`spectax run --log-level debug`), where the default is SUPPRESS so that a flag given
    before the command is not overwritten by the command's own default."""
    parser.add_argument(
        "--version",
        action="version",
        version=f"spectax {__version__}",
        help="print the version and exit" if default is None else argparse.SUPPRESS,
    )
    parser.add_argument(
        "--log-level",
        "--log.level",
        dest="log_level",
        default="info" if default is None else default,
        choices=["debug", "info", "warning", "error"],
        help="default info; debug is safe: secrets are blanked",
    )
    parser.add_argument(
        "--log-format",
        "--log.format",
        dest="log_format",
        default="text" if default is None else default,
        choices=["text", "json"],
        help="json: one object per line (time, level, logger, message, endpoint)",
    )


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, nested ones (`db migrate`) included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                found += [command, *_commands(command)]
    return found


__all__ = ["main"]
