"""Tester declarations: what a client cannot observe (file and key are the evidence)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from .registry import DeclarationError, registry

# ============================================================================================
# Declarations: what the tester states and a client cannot observe
# ============================================================================================

#: The types of a declaration (issue 32): ``boolean`` (``true``/``false`` or ``{met = …, note = "…"}``),
#: ``enum`` (one of ``choices``), ``statement`` (a non-empty sentence that does not read as a negation),
#: ``table`` (a table holding ``keys``; ``enums`` restricts some of them to choices).
TYPES = ("boolean", "enum", "statement", "table")
#: Words that read as a negation: a statement made of one of them says nothing was done.
NEGATIONS = frozenset({"false", "no", "none", "n/a", "na", "not", "nothing", "off", "0", "-", "unknown", "null"})

_GUARD = ("on", "off", "unknown")
#: What ``python -m pytest_llmbench init`` writes where only the tester knows the value (an error if left).
PLACEHOLDER = "..."

#: Named facts a tester can declare: their type, the items they answer, and the keys a table must hold.
DECLARATION_FACTS: dict[str, dict[str, Any]] = {
    "model": {"type": "table", "items": ["5.1.2-MUST-11"], "keys": ("name", "version", "quantization"),
              "help": "model name, version and quantization ('none' allowed)"},
    "hardware": {"type": "table", "items": ["5.1.2-MUST-12"], "keys": ("accelerator", "count", "memory"),
                 "help": "accelerator type, count and memory"},
    "engine": {"type": "table", "items": [], "keys": ("name", "version"),
               "help": "inference engine and version (App. C.1)"},
    "model_loaded": {"type": "boolean", "items": ["4.5.1-MUST-1"], "keys": (),
                     "help": "the model was fully loaded before warm-up"},
    "server_queue_drained": {"type": "boolean", "items": ["4.5.1-MUST-3"], "keys": (),
                             "help": "the server queue was empty when measuring started"},
    "prefix_cache_populated": {"type": "boolean", "items": ["4.5.1-MUST-4"], "keys": (),
                               "help": "the prefix cache held the workload's prefixes after warm-up"},
    "guardrails": {"type": "table", "items": ["4.8.1-MUST-1", "4.8.1-MUST-2", "4.8.1-MUST-3"],
                   "keys": ("input_filter", "output_filter", "systems"),
                   "enums": {"input_filter": _GUARD, "output_filter": _GUARD},
                   "help": "input_filter/output_filter: on|off|unknown; systems: list of names or 'unknown'"},
    "guardrails_default": {"type": "boolean", "items": ["4.8.2-SHOULD-1"], "keys": (),
                           "help": "safety systems ran in their default production configuration"},
    "production_representative": {"type": "boolean", "items": [], "keys": (),
                                  "help": "the run is meant to represent production (turns on §4.8.2)"},
    "special_tokens": {"type": "table", "items": ["4.4.3-MUST-1", "4.4.3-MUST-2", "4.4.3-MUST-3"],
                       "keys": ("bos_eos", "system_prompt", "tool_call_format"),
                       "help": "how the server's usage counts treat BOS/EOS, the system prompt and tool formatting"},
    "tokenizer": {"type": "table", "items": ["4.4.1-MUST-1", "4.4.1-MUST-2", "4.4.1-MUST-3"],
                  "keys": ("name", "version", "vocab_size", "source"),
                  "help": "the server's tokenizer when counts are its usage (§4.4.1): name, version, vocab_size, "
                          "source; only the fields the server does not expose are read"},
    "prefix_caching": {"type": "enum", "choices": ("enabled", "disabled"), "items": ["5.1.2-MUST-13"], "keys": (),
                       "help": "the SUT's prefix caching state: 'enabled' or 'disabled'"},
    "clock_sync": {"type": "table", "items": ["4.7.2-MUST-1", "4.7.2-MUST-2"], "keys": ("method", "accuracy_ms"),
                   "help": "method (single-host|ntp|ptp|chrony|...) and accuracy in ms of the host clock sync"},
    "dataset": {"type": "table", "items": ["4.3.3-MUST-3"], "keys": ("version", "subset_selection", "preprocessing"),
                "help": "dataset version, subset selection and preprocessing of a dataset workload"},
    "terminology": {"type": "statement", "items": ["abstract-SHOULD-1", "1-SHOULD-1"], "keys": (),
                    "help": "the [LLM-TERMS] revision consulted, e.g. 'draft-gaikwad-llm-benchmarking-terminology-00'"},
    "publication_review": {"type": "statement", "items": ["7.1-SHOULD-1"], "keys": (),
                           "help": "how publishing detailed capacity results was weighed"},
    "production_cross_check": {"type": "statement", "items": ["7.2-SHOULD-1"], "keys": (),
                               "help": "how workloads were varied / cross-checked with production samples"},
    "isolated_system": {"type": "boolean", "items": ["7.4-SHOULD-1"], "keys": (),
                        "help": "memory-pressure tests ran on an isolated system"},
    "recovery_procedure": {"type": "statement", "items": ["7.4-SHOULD-2"], "keys": (),
                           "help": "the recovery procedure prepared"},
}


def _negation(v: Any) -> bool:
    return isinstance(v, str) and v.strip().lower().rstrip(".") in NEGATIONS | {""}


def _form(key: str, kind: str, fact: Mapping[str, Any] | None = None) -> str:
    """The right way to write ``key`` (shown with every usage error)."""
    q = f'"{key}"' if "-" in key else key
    if kind == "boolean":
        return f'{q} = true, {q} = false or {q} = {{ met = true, note = "..." }}'
    if kind == "enum":
        return " or ".join(f'{q} = "{c}"' for c in (fact or {}).get("choices", ()))
    if kind == "statement":
        return f'{q} = "<a sentence stating it>" (to state it was not done, leave {key} out)'
    if kind == "id":
        return f'{q} = true, {q} = false, {q} = {{ met = false, note = "..." }} or {q} = "<a sentence stating how it is met>"'
    keys = (fact or {}).get("keys", ())
    return f"{q} = {{ " + ", ".join(f'{k} = "..."' for k in keys) + " }"


def _boolean_error(source: str, key: str, value: Any, kind: str) -> str | None:
    """Why ``value`` is not a boolean declaration (``true``/``false``/``{met, note}``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Mapping):
        extra = sorted(set(map(str, value)) - {"met", "note"})
        if not isinstance(value.get("met"), bool) or extra:
            return (f"{source}: {key} = {dict(value)!r}: a table needs met = true|false and at most a note"
                    f"{' (unknown: ' + ', '.join(extra) + ')' if extra else ''}; write {_form(key, kind)}")
        if "note" in value and not isinstance(value["note"], str):
            return f"{source}: {key}: note must be a string; write {_form(key, kind)}"
        return None
    if kind == "id" and isinstance(value, str) and not _negation(value):
        return None
    why = ("a negation, not a statement" if kind == "id" and _negation(value) else
           "not a boolean or a statement" if kind == "id" else "not a boolean")
    return f"{source}: {key} = {value!r} is {why}; write {_form(key, kind)}"


def check_declaration(key: str, value: Any, source: str) -> None:
    """Raise :class:`DeclarationError` (naming ``key`` and ``source``, with the right form) when ``value``
    does not fit the type of ``key``: a named fact's type, or a requirement id (boolean or statement)."""
    fact = DECLARATION_FACTS.get(key)
    kind = fact["type"] if fact else "id"
    values = value.values() if isinstance(value, Mapping) else (value,)
    if any(isinstance(v, str) and v.strip() == PLACEHOLDER for v in values):
        raise DeclarationError(f"{source}: {key} still holds the placeholder {PLACEHOLDER!r} that `python -m "
                               f"pytest_llmbench init` wrote; give the true value or comment the line out again")
    if kind in ("boolean", "id"):
        err = _boolean_error(source, key, value, kind)
    elif kind == "enum":
        ok = isinstance(value, str) and value.strip().lower() in fact["choices"]  # type: ignore[index]
        err = None if ok else f"{source}: {key} = {value!r} is not one of {', '.join(fact['choices'])}; write " \
                              f"{_form(key, kind, fact)}"  # type: ignore[index]
    elif kind == "statement":
        ok = isinstance(value, str) and not _negation(value)
        why = "a negation, not a statement" if _negation(value) else "not a statement"
        err = None if ok else f"{source}: {key} = {value!r} is {why}; write {_form(key, kind)}"
    else:
        err = None
        if not isinstance(value, Mapping):
            err = f"{source}: {key} must be a table with {', '.join(fact['keys'])}; write {_form(key, kind, fact)}"  # type: ignore[index]
        else:
            for sub, choices in (fact.get("enums") or {}).items():  # type: ignore[union-attr]
                v = value.get(sub)
                v = ("on" if v else "off") if isinstance(v, bool) else v  # YAML 1.1 reads on/off as booleans
                if v is not None and (not isinstance(v, str) or v.strip().lower() not in choices):
                    err = f"{source}: {key}.{sub} = {value.get(sub)!r} is not one of {', '.join(choices)}"
                    break
    if err is not None:
        raise DeclarationError(err)


def declared_flag(value: Any) -> tuple[bool, str]:
    """A boolean declaration as ``(met, note)``; a requirement id's statement is met with the statement as note."""
    if isinstance(value, Mapping):
        return bool(value.get("met") is True), str(value.get("note") or "")
    if isinstance(value, bool):
        return value, ""
    return True, str(value)


class Declarations(Mapping[str, Any]):
    """Tester declarations: requirement IDs or named facts (:data:`DECLARATION_FACTS`) -> value.

    Each named fact has a type (:data:`TYPES`, :func:`check_declaration`); a requirement-ID value is
    ``true``/``false``, a table ``{met = true, note = "..."}`` or a statement (counts as met, kept as
    evidence; a negation such as "no" is an error). Unknown keys and values of the wrong type are
    usage errors naming the key and the file (typos must not silently leave an item undeclared).
    """

    def __init__(self, data: Mapping[str, Any] | None = None, *, source: str = "(inline)") -> None:
        self.source = source
        self._data: dict[str, Any] = {}
        reg = registry()
        for key, value in (data or {}).items():
            k = str(key)
            if k not in reg and k not in DECLARATION_FACTS:
                raise DeclarationError(
                    f"{source}: unknown declaration {k!r}; use a requirement id (e.g. '4.5.1-MUST-1') or one of: "
                    f"{', '.join(sorted(DECLARATION_FACTS))}")
            check_declaration(k, value, source)
            self._data[k] = value

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def flag(self, key: str) -> bool | None:
        """A boolean declaration's value (None when undeclared)."""
        return declared_flag(self._data[key])[0] if key in self._data else None

    def __repr__(self) -> str:
        return f"Declarations({self._data!r}, source={self.source!r})"

    @classmethod
    def from_file(cls, path: str | Path) -> Declarations:
        """A TOML or YAML file. TOML: top-level keys, or ``[tool.llmbench.declarations]``."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise DeclarationError(f"declarations file {p}: {exc.strerror or exc}") from None
        try:
            if p.suffix.lower() in (".yaml", ".yml"):
                data = yaml.safe_load(text) or {}
            else:
                data = tomllib.loads(text)
        except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
            raise DeclarationError(f"declarations file {p}: {exc}") from None
        if not isinstance(data, Mapping):
            raise DeclarationError(f"declarations file {p}: expected a table of declarations")
        nested = data.get("tool", {}).get("llmbench", {}).get("declarations") if "tool" in data else None
        if nested is not None:
            data = nested
        return cls(data, source=str(p))

    @classmethod
    def from_pyproject(cls, path: str | Path) -> Declarations:
        """``[tool.llmbench.declarations]`` of a pyproject.toml (empty if absent)."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DeclarationError(f"{p}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise DeclarationError(f"{p}: {exc}") from None
        table = data.get("tool", {}).get("llmbench", {}).get("declarations", {})
        return cls(table, source=f"{p} [tool.llmbench.declarations]")

    @classmethod
    def load(cls, path: str | Path | None = None, *, rootdir: str | Path | None = None) -> Declarations:
        """The declarations file if given, merged over ``rootdir/pyproject.toml``'s table (file wins)."""
        base: dict[str, Any] = {}
        sources = []
        if rootdir is not None and (Path(rootdir) / "pyproject.toml").is_file():
            py = cls.from_pyproject(Path(rootdir) / "pyproject.toml")
            if py:
                base.update(py._data)
                sources.append(py.source)
        if path is not None:
            f = cls.from_file(path)
            base.update(f._data)
            sources.append(f.source)
        return cls(base, source=" + ".join(sources) or "(none)")


def _as_declarations(d: Declarations | Mapping[str, Any] | None) -> Declarations:
    if isinstance(d, Declarations):
        return d
    return Declarations(d or {}, source="(inline)")




def effective_declarations(settings: Any, own: Mapping[str, Any] | None = None) -> Declarations:
    """The tester declarations in force: what the SUT declares about itself (``own``: the embedded
    simulator's, from ``sut.self_declarations``), then the user's file (``--llm-declarations``) or
    ``[tool.llmbench.declarations]`` in pyproject.toml, which overrides it.

    One function for the compliance engine and the reports.
    """
    data: dict[str, Any] = {}
    source = []
    if own:
        data.update(own)
        source.append("embedded simulator")
    user = Declarations.load(getattr(settings, "declarations", None), rootdir=getattr(settings, "rootdir", None))
    if len(user):
        data.update(dict(user))
        source.append(user.source)
    return Declarations(data, source=" + ".join(source) or "(none)")
