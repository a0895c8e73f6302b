"""pytest glue: register every setting (settings.OPTIONS) as a ``--llm-*`` flag and an ``llm_*`` ini key."""

from __future__ import annotations

import pytest

from .settings import OPTIONS, LLMBenchConfigError, Settings, resolve
from .sut.adapters import KINDS

__all__ = ["CHOICES", "SERVER_KINDS", "add_options", "settings_from_config"]

#: ``--llm-server-kind``'s choices: the server adapters' kinds.
SERVER_KINDS: tuple[str, ...] = KINDS
#: The choices settings.py cannot name (it sits below the adapters), by option name.
CHOICES: dict[str, tuple[str, ...]] = {"server-kind": SERVER_KINDS}


def add_options(parser: pytest.Parser) -> None:
    """Register every option as a CLI flag and an ini key (pytest_addoption)."""
    group = parser.getgroup("llmbench", "LLM serving benchmarks (draft-gaikwad-llm-benchmarking-methodology)")
    for opt in OPTIONS:
        choices = f": {', '.join(CHOICES[opt.name])}" if opt.name in CHOICES else ""
        help_text = f"{opt.help}{choices} [env {opt.env}, ini {opt.ini}]".replace("%", "%%")  # argparse %-formats
        if opt.kind == "bool":
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.dest, help=help_text)
            parser.addini(opt.ini, opt.help, type="bool", default=opt.default)
        elif opt.kind == "list":
            group.addoption(opt.flag, action="append", default=None, dest=opt.dest, help=help_text)
            parser.addini(opt.ini, opt.help, type="linelist", default=[])
        elif opt.kind == "optional":  # --llm-compare [REF]: without a value, "latest"
            group.addoption(opt.flag, action="store", nargs="?", const="latest", default=None, dest=opt.dest,
                            help=help_text)
            parser.addini(opt.ini, opt.help, default=None)
        else:
            group.addoption(opt.flag, action="store", default=None, dest=opt.dest, help=help_text)
            parser.addini(opt.ini, opt.help, default=None)


def settings_from_config(config: pytest.Config) -> Settings:
    """The effective settings; a bad value is a ``UsageError`` naming its source (``--llm-profile: ...``)."""
    try:
        settings = resolve(config.getoption, config.getini, choices=CHOICES)
    except LLMBenchConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    settings.rootdir = config.rootpath
    return settings
