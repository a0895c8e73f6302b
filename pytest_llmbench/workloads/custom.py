"""Custom workloads from a TOML, YAML or JSON file (§4.3 MAY, fully specified per §4.3.1).

Every field §4.3.1 demands must be present; a file that lacks some raises one
:class:`WorkloadError` naming the file and listing all of them. The declaration of a custom
workload carries the complete spec (4.3-MUST-1). See ``docs/workloads.md`` for the format.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..common.records import RequestSpec
from ..common.tokenizer import Tokenizer, TokenizerError, get_tokenizer
from .core import Workload, WorkloadDeclaration, finish
from .distributions import DISTRIBUTION_PARAMS, LengthDistribution, WorkloadError
from .text import SYSTEM_PROMPT_SOURCE, CodeWriter, comment_marker, text_factory

__all__ = ["OUTPUT_CONTROLS", "build_custom", "load_spec", "validate_spec"]

OUTPUT_CONTROLS = ("max_tokens", "stop", "both")
_DIST_META = {"type", "unit", "tokenizer", "control", "stop", "ignore_eos", "params", "note"}


def load_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a workload spec file by extension (.toml, .yaml/.yml, .json)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise WorkloadError(f"workload spec file {str(p)!r} does not exist")
    raw = p.read_bytes()
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            data = tomllib.loads(raw.decode("utf-8"))
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        elif suffix == ".json":
            data = json.loads(raw)
        else:
            raise WorkloadError(f"{p}: workload spec must be .toml, .yaml, .yml or .json")
    except WorkloadError:
        raise
    except Exception as exc:  # tomllib/yaml/json decode errors
        raise WorkloadError(f"{p}: cannot parse workload spec: {exc}") from exc
    if not isinstance(data, dict):
        raise WorkloadError(f"{p}: a workload spec must be a table/mapping at the top level")
    return data


def _dist_params(section: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(section.get("params"), Mapping):
        return dict(section["params"])
    return {k: v for k, v in section.items() if k not in _DIST_META}


def _check_dist(prefix: str, section: Any, missing: list[str], problems: list[str], *, extra: tuple[str, ...]) -> None:
    if not isinstance(section, Mapping):
        missing.append(prefix)
        return
    for key in ("type", "unit", *extra):
        if key not in section:
            missing.append(f"{prefix}.{key}")
    t = section.get("type")
    if t is None:
        return
    if t not in DISTRIBUTION_PARAMS:
        problems.append(f"{prefix}.type {t!r} is not one of {', '.join(DISTRIBUTION_PARAMS)}")
        return
    params = _dist_params(section)
    for key in DISTRIBUTION_PARAMS[t]:
        if key not in params:
            missing.append(f"{prefix}.{key}")
    if t == "empirical" and "values" not in params and "histogram" not in params:
        missing.append(f"{prefix}.values (or {prefix}.histogram)")
    if "unit" in section and section["unit"] != "tokens":
        problems.append(f"{prefix}.unit must be 'tokens', got {section['unit']!r}")
    if not any(m.startswith(prefix + ".") for m in missing):
        try:
            LengthDistribution(t, params)
        except WorkloadError as exc:
            problems.append(f"{prefix}: {exc}")


#: Body fields the workload itself sets: ``request_fields`` may not override them.
_BODY_FIELDS = frozenset({"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "min_tokens",
                          "ignore_eos", "temperature", "stop", "stream", "stream_options"})


def validate_spec(spec: Mapping[str, Any], source: str = "<spec>") -> None:
    """Raise one :class:`WorkloadError` listing every missing or invalid §4.3.1 field."""
    missing: list[str] = []
    problems: list[str] = []
    _check_dist("input_length", spec.get("input_length"), missing, problems, extra=("tokenizer",))
    out = spec.get("output_length")
    _check_dist("output_length", out, missing, problems, extra=("control",))
    if isinstance(out, Mapping) and "control" in out:
        if out["control"] not in OUTPUT_CONTROLS:
            problems.append(f"output_length.control must be one of {', '.join(OUTPUT_CONTROLS)}, got {out['control']!r}")
        elif out["control"] in ("stop", "both") and not out.get("stop"):
            missing.append("output_length.stop (control uses stop sequences)")
    content = spec.get("content")
    if not isinstance(content, Mapping):
        missing.append("content")
    else:
        for key in ("domain", "language", "system_prompt", "system_prompt_tokens"):
            if key not in content:
                missing.append(f"content.{key}")
        sp, spt = content.get("system_prompt"), content.get("system_prompt_tokens")
        if sp is not None and not isinstance(sp, bool):
            problems.append("content.system_prompt must be true or false")
        if spt is not None and (not isinstance(spt, int) or isinstance(spt, bool) or spt < 0):
            problems.append("content.system_prompt_tokens must be an integer >= 0")
        elif sp is True and spt == 0:
            problems.append("content.system_prompt is true but system_prompt_tokens is 0")
    ps = spec.get("prefix_sharing")
    if not isinstance(ps, Mapping):
        missing.append("prefix_sharing")
    else:
        for key in ("fraction", "length"):
            if key not in ps:
                missing.append(f"prefix_sharing.{key}")
        frac = ps.get("fraction")
        if frac is not None and (not isinstance(frac, (int, float)) or not 0 <= frac <= 1):
            problems.append(f"prefix_sharing.fraction must be within [0, 1], got {frac!r}")
        length = ps.get("length")
        if isinstance(length, Mapping):
            _check_dist("prefix_sharing.length", {"unit": "tokens", **length}, missing, problems, extra=())
        elif length is not None and length not in ("none", 0):
            problems.append("prefix_sharing.length must be a distribution table, or 'none' when fraction is 0")
        elif length is not None and frac:
            problems.append("prefix_sharing.length is 'none' but fraction > 0")
        sel = ps.get("selection", "uniform")
        if sel not in ("uniform", "zipf"):
            problems.append(f"prefix_sharing.selection must be 'uniform' or 'zipf', got {sel!r}")
    rf = spec.get("request_fields")
    if rf is not None and not isinstance(rf, Mapping):
        problems.append("request_fields must be a table of request-body fields (e.g. reasoning_effort = \"high\")")
    elif isinstance(rf, Mapping):
        clash = sorted(set(rf) & _BODY_FIELDS)
        if clash:
            problems.append(f"request_fields may not set {', '.join(clash)} (the workload's own fields)")
    if missing or problems:
        lines = [f"{source}: incomplete or invalid workload spec (§4.3.1)"]
        if missing:
            lines.append("missing: " + ", ".join(missing))
        if problems:
            lines.append("invalid: " + "; ".join(problems))
        raise WorkloadError("\n".join(lines))


def _dist(section: Mapping[str, Any], tokenizer: str) -> LengthDistribution:
    return LengthDistribution(str(section["type"]), _dist_params(section), unit="tokens", tokenizer=tokenizer)


def build_custom(
    spec_or_path: Mapping[str, Any] | str | os.PathLike[str],
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
) -> Workload:
    """Build a custom workload from a spec file (or an already parsed mapping).

    ``input_length`` is the whole input (system prompt and shared prefix included); a drawn
    length too short to hold them is raised to prefix + system + 1 and counted in the notes.
    ``max_tokens`` is always the drawn output length; ``control = "stop"/"both"`` adds the stop
    sequences, ``ignore_eos = true`` forces the length (``min_tokens = max_tokens``).
    """
    from .standard import _check_n, _exact_subset, _spec, _streams, _zipf_probs  # shared helpers

    n = _check_n(n)
    if isinstance(spec_or_path, Mapping):
        spec, source, digest = dict(spec_or_path), "<mapping>", None
    else:
        source = str(spec_or_path)
        spec = load_spec(spec_or_path)
        digest = hashlib.sha256(Path(spec_or_path).expanduser().read_bytes()).hexdigest()
    validate_spec(spec, source)
    tname = str(spec["input_length"]["tokenizer"])
    if tokenizer is None:
        try:
            tokenizer = get_tokenizer(tname)
        except TokenizerError as exc:
            raise WorkloadError(f"{source}: input_length.tokenizer: {exc}") from exc
    elif tname not in (tokenizer.declaration.name,) and get_tokenizer(tname) is not tokenizer:
        raise WorkloadError(
            f"{source}: spec unit is {tname!r} tokens but the tokenizer given is {tokenizer.declaration.name!r}"
        )
    tok = tokenizer
    factory = text_factory(tok)
    tdecl_name = tok.declaration.name
    name = str(spec.get("name") or (Path(source).stem if source != "<mapping>" else "custom"))
    din = _dist(spec["input_length"], tdecl_name)
    out = spec["output_length"]
    dout = _dist(out, tdecl_name)
    control = str(out["control"])
    stop = tuple(out.get("stop") or ()) if control in ("stop", "both") else None
    force = bool(out.get("ignore_eos", False))
    request_fields = tuple(sorted(dict(spec.get("request_fields") or {}).items()))  # reasoning_effort, ... (issue 49)
    content = spec["content"]
    ps = spec["prefix_sharing"]
    r_len, r_out, r_txt, r_share, r_sel, r_pfx, r_sys = _streams(seed, 7)
    lin = din.sample(r_len, n)
    lout = dout.sample(r_out, n)
    code = str(content["domain"]).lower() == "code"
    writer = CodeWriter(factory, r_txt) if code else None
    lang = "python"
    # system prompt
    sys_text = None
    sys_n = 0
    if content["system_prompt"]:
        sys_text = factory.fit(np.random.default_rng(0), int(content["system_prompt_tokens"]),
                               body=tok.encode(SYSTEM_PROMPT_SOURCE)).text
        sys_n = len(tok.encode(sys_text))
    sys_frac = float(content.get("system_prompt_fraction", 1.0)) if sys_text else 0.0
    with_sys = _exact_subset(r_sys, n, sys_frac)
    # prefixes
    frac = float(ps["fraction"])
    k_pfx = int(ps.get("prefixes", 1))
    prefixes: list[tuple[str, list[int]]] = []
    if frac > 0:
        plen = _dist({"unit": "tokens", **ps["length"]}, tdecl_name).sample(r_pfx, k_pfx)
        for L in plen:
            if writer is not None:
                text = factory.fit_code(r_pfx, writer.file(lang, int(L) * 6), int(L), comment=comment_marker(lang)).text
            else:
                text = factory.fit(r_pfx, int(L), head="Context:\n", body=factory.prose_ids(r_pfx, int(L))).text
            prefixes.append((text, tok.encode(text)))
    shared = _exact_subset(r_share, n, frac)
    if ps.get("selection", "uniform") == "zipf":
        probs = _zipf_probs(k_pfx, float(ps.get("s", 1.5)))
    else:
        probs = np.full(k_pfx, 1.0 / k_pfx)
    pick = r_sel.choice(k_pfx, size=n, p=probs)
    specs: list[RequestSpec] = []
    raised = 0
    for i in range(n):
        s = bool(with_sys[i])
        pid, ptext, pids = None, "", []
        if shared[i]:
            k = int(pick[i])
            pid, (ptext, pids) = f"prefix-{k}", prefixes[k]
        fixed = len(pids) + (sys_n if s else 0)
        target = int(lin[i])
        if target < fixed + 1:
            target, raised = fixed + 1, raised + 1
        user_target = target - (sys_n if s else 0)
        if writer is not None:
            head = ptext + writer.task_head(lang)
            fitted = factory.fit(r_txt, user_target, head=head, tail="\n")
        else:
            body = factory.prose_ids(r_txt, user_target - len(pids))
            fitted = factory.fit(r_txt, user_target, head=ptext, body=body)
        specs.append(
            _spec(i, name, fitted.ids, fitted.text, target, lout[i], force, system_prompt=sys_text if s else None,
                  prefix_id=pid, prefix_tokens=len(pids), stop=stop, request_fields=request_fields)
        )
    notes = ["custom workload (§4.3 MAY): reported in full; content is synthetic text in the declared domain"]
    if raised:
        notes.append(f"{raised} drawn input lengths were below prefix + system prompt + 1 and were raised")
    prefix_json = dict(ps)
    if isinstance(ps["length"], Mapping):
        prefix_json["length"] = _dist({"unit": "tokens", **ps["length"]}, tdecl_name).to_json()
    prefix_json["prefix_lengths"] = [len(p) for _, p in prefixes]
    decl = WorkloadDeclaration(
        name=name,
        description=str(spec.get("description", "custom workload")),
        standard=False,
        seed=seed,
        request_count=n,
        input_length=din,
        output_length=dout,
        output_control=f"{control}" + (f" {list(stop)}" if stop else "") + (
            "; min_tokens = max_tokens and ignore_eos" if force else "; max_tokens = drawn output length"),
        content={**dict(content), "system_prompt_tokens": sys_n if sys_text else int(content["system_prompt_tokens"]),
                 "generation": "synthetic code-like text" if code else "random lowercase-word tokens with punctuation"},
        prefix_sharing=prefix_json,
        tokenizer=tok.declaration.to_json(),
        spec={"source": source, "sha256": digest, "content": spec},
        params={},
        notes=notes,
    )
    return finish(specs, decl, tok)
