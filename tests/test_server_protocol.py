"""One home for the server protocol (issue 45, item 2; docs/architecture.md "The adapter's protocol hooks").

Outside ``sut/adapters/`` (and ``simulator/``, which serves these paths) no string of the package,
f-string parts included, names a server's own endpoint (``/tokenize``, ``/detokenize``, ``/props``,
``/slots``, ``/reset_prefix_cache``, ``/flush_cache``), and no code compares a value with a server-kind
name (``== "vllm"``, ``in ("llama.cpp", ...)``, ``case "sglang"``). Docstrings may name them: they
document, they do not speak. The check walks every module with ``ast`` and is shown to catch a planted
offence. The import-linter contract ``procedures-off-server-kinds`` keeps ``procedures/`` off the
adapter modules themselves (tests/test_architecture.py plants one).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.adapters.simulator import SIMULATOR_KIND

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_llmbench"
#: where the protocol lives (the adapters) or is served (the simulator)
HOMES = (PACKAGE / "sut" / "adapters", PACKAGE / "simulator")
ENDPOINT = re.compile(r"/(?:tokenize|detokenize|props|slots|reset_prefix_cache|flush_cache)\b")


def _kind_names() -> frozenset[str]:
    names = {SIMULATOR_KIND}
    for a in adapters.ADAPTERS:
        names.add(a.kind)
        names.update(a.aliases)
        names.update(f.name for f in a.tokenize_forms)
    return frozenset(names)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _names_kind(node: ast.AST, kinds: frozenset[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.strip().lower() in kinds
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_kind(e, kinds) for e in node.elts)
    return False


def offences(source: str, kinds: frozenset[str]) -> list[str]:
    """``line: what`` for every server endpoint named in a string and every server-kind comparison."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            hit = ENDPOINT.search(node.value)
            if hit:
                found.append(f"{node.lineno}: names {hit.group(0)} in {node.value[:60]!r}")
        elif isinstance(node, ast.Compare) and any(_names_kind(n, kinds) for n in (node.left, *node.comparators)):
            found.append(f"{node.lineno}: compares with a server kind ({ast.unparse(node)[:60]})")
        elif isinstance(node, ast.MatchValue) and _names_kind(node.value, kinds):
            found.append(f"{node.lineno}: matches a server kind ({ast.unparse(node.value)})")
    return found


def _outside_homes() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not any(p.is_relative_to(h) for h in HOMES))


def test_no_server_protocol_outside_the_adapters() -> None:
    kinds = _kind_names()
    assert {"vllm", "llama.cpp", "sglang", "openai-compatible", SIMULATOR_KIND} <= kinds
    modules = _outside_homes()
    assert len(modules) > 100 and PACKAGE / "procedures" / "prompts.py" in modules
    found = {str(p.relative_to(PACKAGE)): hits for p in modules
             if (hits := offences(p.read_text(encoding="utf-8"), kinds))}
    assert found == {}, found


@pytest.mark.parametrize("planted", [
    'url = root + "/tokenize"',
    'url = f"{root}/slots/{i}?action=erase"',
    'r = post(sut, "/reset_prefix_cache")',
    'ok = sut.server_kind == "vllm"',
    'ok = "llama.cpp" != kind',
    'ok = kind in ("sglang", "openai")',
    'match kind:\n    case "llama-server":\n        pass',
])
def test_the_walk_catches_a_planted_offence(planted: str) -> None:
    source = '"""A module naming /props in its docstring is fine."""\n' + planted + "\n"
    assert len(offences(source, _kind_names())) == 1, planted


def test_docstrings_and_other_strings_pass() -> None:
    source = ('def f() -> str:\n    """POST /tokenize is documented here."""\n'
              '    return "hf:/path/to/tokenizer.json" + "/v1/models" + "vllm:num_requests_waiting"\n')
    assert offences(source, _kind_names()) == []
