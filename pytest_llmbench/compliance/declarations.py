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

#: Named facts a tester can declare, the items they answer, and the keys a table must hold.
DECLARATION_FACTS: dict[str, dict[str, Any]] = {
    "model": {"items": ["5.1.2-MUST-11"], "keys": ("name", "version", "quantization"),
              "help": "model name, version and quantization ('none' allowed)"},
    "hardware": {"items": ["5.1.2-MUST-12"], "keys": ("accelerator", "count", "memory"),
                 "help": "accelerator type, count and memory"},
    "engine": {"items": [], "keys": ("name", "version"), "help": "inference engine and version (App. C.1)"},
    "model_loaded": {"items": ["4.5.1-MUST-1"], "keys": (), "help": "the model was fully loaded before warm-up"},
    "server_queue_drained": {"items": ["4.5.1-MUST-3"], "keys": (),
                             "help": "the server queue was empty when measuring started"},
    "prefix_cache_populated": {"items": ["4.5.1-MUST-4"], "keys": (),
                               "help": "the prefix cache held the workload's prefixes after warm-up"},
    "guardrails": {"items": ["4.8.1-MUST-1", "4.8.1-MUST-2", "4.8.1-MUST-3"],
                   "keys": ("input_filter", "output_filter", "systems"),
                   "help": "input_filter/output_filter: on|off|unknown; systems: list of names or 'unknown'"},
    "guardrails_default": {"items": ["4.8.2-SHOULD-1"], "keys": (),
                           "help": "safety systems ran in their default production configuration"},
    "production_representative": {"items": [], "keys": (),
                                  "help": "the run is meant to represent production (turns on §4.8.2)"},
    "special_tokens": {"items": ["4.4.3-MUST-1", "4.4.3-MUST-2", "4.4.3-MUST-3"],
                       "keys": ("bos_eos", "system_prompt", "tool_call_format"),
                       "help": "how the server's usage counts treat BOS/EOS, the system prompt and tool formatting"},
    "tokenizer": {"items": ["4.4.1-MUST-1", "4.4.1-MUST-2", "4.4.1-MUST-3"], "keys": (),
                  "help": "the server's tokenizer when counts are its usage (§4.4.1): name, version, vocab_size, "
                          "source; only the fields the server does not expose are read"},
    "prefix_caching": {"items": ["5.1.2-MUST-13"], "keys": (),
                       "help": "the SUT's prefix caching state: 'enabled' or 'disabled'"},
    "clock_sync": {"items": ["4.7.2-MUST-1", "4.7.2-MUST-2"], "keys": ("method", "accuracy_ms"),
                   "help": "method (ntp|ptp|chrony|...) and accuracy in ms of the host clock sync"},
    "dataset": {"items": ["4.3.3-MUST-3"], "keys": ("version", "subset_selection", "preprocessing"),
                "help": "dataset version, subset selection and preprocessing of a dataset workload"},
    "terminology": {"items": ["abstract-SHOULD-1", "1-SHOULD-1"], "keys": (),
                    "help": "the [LLM-TERMS] revision consulted, e.g. 'draft-gaikwad-llm-benchmarking-terminology-00'"},
    "publication_review": {"items": ["7.1-SHOULD-1"], "keys": (),
                           "help": "how publishing detailed capacity results was weighed"},
    "production_cross_check": {"items": ["7.2-SHOULD-1"], "keys": (),
                               "help": "how workloads were varied / cross-checked with production samples"},
    "isolated_system": {"items": ["7.4-SHOULD-1"], "keys": (), "help": "memory-pressure tests ran on an isolated system"},
    "recovery_procedure": {"items": ["7.4-SHOULD-2"], "keys": (), "help": "the recovery procedure prepared"},
}


class Declarations(Mapping[str, Any]):
    """Tester declarations: requirement IDs or named facts (:data:`DECLARATION_FACTS`) -> value.

    A requirement-ID value is ``true``/``false``, a statement string (counts as met, kept as
    evidence) or a table ``{met = true, note = "..."}``. Unknown keys are an error (typos must not
    silently leave an item undeclared).
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
            if k in DECLARATION_FACTS:
                keys = DECLARATION_FACTS[k]["keys"]
                if keys and not isinstance(value, Mapping):
                    raise DeclarationError(f"{source}: {k} must be a table with {', '.join(keys)}")
            elif not isinstance(value, (bool, str, Mapping)):
                raise DeclarationError(f"{source}: {k} must be true/false, a statement or {{met=..., note=...}}")
            self._data[k] = value

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

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
