"""``python -m pytest_llmbench init [DIR]``: a starting point in a user's repository (README "Use it
in your own repository").

Written, each only where no file of that name exists (``--force`` overwrites, naming each file):

* ``benchmarks/test_5_*.py``: the shipped suites (:mod:`pytest_llmbench.suites`) to adapt; their
  SLO thresholds are marked as examples;
* ``benchmarks/conftest.py``: which servers the plugin's adapters switch, and the configure-SUT
  hook for one they cannot, commented;
* ``benchmarks/declarations.toml``: every tester declaration (draft §7) as a commented line naming
  its draft item, so an unfilled key stays absent and its item needs a declaration;
* pytest configuration: a ``[tool.pytest.ini_options]`` section appended to ``pyproject.toml`` when
  it has none, else ``pytest.ini`` when the folder has no pytest configuration at all;
* ``.github/workflows/llmbench.yml``: baselines on main, comparison on pull requests (§6).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["StarterError", "Written", "declarations_template", "main", "write_starter"]

BENCH_DIR = "benchmarks"
WORKFLOW = ".github/workflows/llmbench.yml"
#: files whose presence means pytest is already configured in a folder (pytest's own list)
PYTEST_CONFIGS = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")
EXAMPLE_HEADER = ("# Written by `python -m pytest_llmbench init` from the suites shipped with pytest-llmbench.\n"
                  "# The SLO thresholds below are EXAMPLES: set your service's own before gating on them.\n")


class StarterError(Exception):
    """A file exists and --force was not given, or the target is not a folder."""


@dataclass
class Written:
    """What ``init`` did: files written, overwritten (``--force``), and extended (pyproject.toml)."""

    written: list[Path] = field(default_factory=list)
    overwritten: list[Path] = field(default_factory=list)
    extended: list[Path] = field(default_factory=list)


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def _suites() -> dict[str, str]:
    """The shipped suites' test files, each with the example header."""
    root = resources.files("pytest_llmbench.suites")
    out = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.startswith("test_") and entry.name.endswith(".py"):
            out[entry.name] = EXAMPLE_HEADER + entry.read_text(encoding="utf-8")
    return out


def _example(key: str, fact: Mapping[str, Any]) -> str:
    """An example value of the declaration's type (docs/slo-and-compliance.md "Declaration types");
    the placeholder where only the tester knows the value (refused if a line is uncommented unfilled)."""
    from ..compliance.declarations import PLACEHOLDER

    kind = fact.get("type")
    keys = tuple(fact.get("keys") or ())
    if kind == "boolean":
        return "true"
    if kind == "enum":
        return f'"{(fact.get("choices") or (PLACEHOLDER,))[0]}"'
    if keys:
        enums = fact.get("enums") or {}
        return "{ " + ", ".join(f'{k} = "{enums[k][0]}"' if k in enums else f'{k} = "{PLACEHOLDER}"'
                                for k in keys) + " }"
    return f'"{PLACEHOLDER}"'


def declarations_template() -> str:
    """Every declaration key as a commented line naming its draft items and what to state."""
    from ..compliance.declarations import DECLARATION_FACTS

    lines = [
        "# Tester declarations (draft §7): what only you can state about the system under test.",
        "# Written by `python -m pytest_llmbench init`. Uncomment a line and give the true value;",
        "# a key left commented stays absent and its draft item shows as needs-declaration in the",
        "# report. The types and each key's meaning: docs/slo-and-compliance.md (pytest-llmbench).",
        "",
    ]
    for key, fact in DECLARATION_FACTS.items():
        items = ", ".join(fact.get("items") or ()) or "report only"
        what = fact.get("help", "")
        lines.append(f"# {key} = {_example(key, fact)}")
        lines.append(f"#     {items}: {what}" if what else f"#     {items}")
    return "\n".join(lines) + "\n"


def _pytest_config(dest: Path) -> tuple[str, str] | None:
    """(file name, text) of the pytest configuration to write, or None when the folder has one."""
    ini = _template("pytest.ini")
    pyproject = dest / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        if "[tool.pytest.ini_options]" in text:
            return None
        section = ini.replace("[pytest]", "[tool.pytest.ini_options]")
        body = []
        for line in section.splitlines():  # ini "key = value" -> TOML "key = \"value\""
            if line and not line.startswith(("#", "[")) and "=" in line:
                k, v = (s.strip() for s in line.split("=", 1))
                line = f'{k} = "{v}"'
            body.append(line)
        return "pyproject.toml", text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    if any((dest / name).is_file() for name in PYTEST_CONFIGS):
        return None
    return "pytest.ini", ini


def plan(dest: Path) -> dict[str, str]:
    """Relative path -> text of every file ``init`` writes into ``dest``."""
    files = {f"{BENCH_DIR}/{name}": text for name, text in _suites().items()}
    files[f"{BENCH_DIR}/conftest.py"] = _template("conftest.py.tmpl")
    files[f"{BENCH_DIR}/declarations.toml"] = declarations_template()
    files[WORKFLOW] = _template("llmbench.yml")
    config = _pytest_config(dest)
    if config is not None:
        files[config[0]] = config[1]
    return files


def write_starter(dest: Path, *, force: bool = False) -> Written:
    """Write :func:`plan` into ``dest``; without ``force`` an existing file is an error naming it
    (nothing is written then). A pyproject.toml gains its pytest section, never loses a line."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise StarterError(f"{dest} is not a folder")
    files = plan(dest)
    existing = [rel for rel in files if (dest / rel).exists() and rel != "pyproject.toml"]
    if existing and not force:
        raise StarterError(f"{dest / existing[0]} exists ({len(existing)} file(s) in the way: "
                           f"{', '.join(existing)}); move them away or pass --force to overwrite")
    done = Written()
    for rel, text in files.items():
        path = dest / rel
        kind = done.extended if rel == "pyproject.toml" else done.overwritten if path.exists() else done.written
        kind.append(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return done


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR", help="the repository to write into (default: .)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist (each is named)")


def main(args: argparse.Namespace) -> int:
    try:
        done = write_starter(Path(args.dir), force=args.force)
    except (StarterError, OSError) as exc:
        print(f"pytest_llmbench init: {exc}", file=sys.stderr)
        return 2
    for path in done.written:
        print(f"wrote {path.as_posix()}")
    for path in done.overwritten:
        print(f"overwrote {path.as_posix()}")
    for path in done.extended:
        print(f"added [tool.pytest.ini_options] to {path.as_posix()}")
    print(f"next: pytest {BENCH_DIR}/test_5_1_ttft.py   (embedded simulator; --llm-endpoint URL for your server)")
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_llmbench init")
    add_arguments(parser)
    return main(parser.parse_args(argv))
