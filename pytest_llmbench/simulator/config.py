"""The simulator's configuration (:class:`SimConfig`) and the analytic predictions derived from it.

Every modelled delay is given in *model* milliseconds and multiplied by ``time_scale`` to become
real time; every ``predicted_*`` method returns real seconds (after ``time_scale``) so tests and
procedures can compare measurements with them directly. The defaults resemble a 7B model on one
24 GB GPU (see docs/simulator.md for the meaning of each field).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["GUARDRAIL_MODES", "GUARDRAIL_SETTINGS", "REASONING_MODES", "RUNTIME_FIELDS", "SimConfig", "SimConfigError", "guardrail_defaults"]

#: Guardrail modes (§5.10): which filters run.
GUARDRAIL_MODES = ("none", "input", "output", "full")

#: The guardrail models' settings (§5.10); at their defaults they are the simulator's default safety
#: configuration (§4.8.2), which ``/admin/config`` reports as ``guardrail_defaults``.
GUARDRAIL_SETTINGS = ("guardrail_input_base_ms", "guardrail_input_per_token_ms", "guardrail_output_per_chunk_ms",
                      "guardrail_refusal_rate")

#: Reasoning modes (issue 49): how the simulated model's thinking reaches the client. ``none``: no thinking;
#: ``streamed``: reasoning deltas before the content (``delta.reasoning_content`` on chat,
#: ``choices[0].reasoning_content`` on completions); ``tags``: ``<think>...</think>`` inside the content;
#: ``hidden``: the same thinking time passes and usage counts the tokens, with no delta.
REASONING_MODES = ("none", "streamed", "hidden", "tags")

#: Fields that ``POST /admin/config`` may change while the server runs.
RUNTIME_FIELDS = frozenset(
    {
        "prefix_cache",
        "guardrails",
        "guardrail_refusal_rate",
        "tokens_per_chunk",
        "chunked_prefill",
        "max_num_batched_tokens",
        "time_scale",
        "timing",
        "eos_mean_tokens",
        "reasoning",
        "reasoning_mean_tokens",
        "tool_call_tokens",
    }
)


class SimConfigError(ValueError):
    """A configuration value is invalid (the message names the field)."""


@dataclass
class SimConfig:
    """Every parameter of the simulated SUT. Times in model milliseconds (scaled by ``time_scale``)."""

    # --- identity / reproducibility ---------------------------------------------------------
    model_name: str = "llmbench-sim"  # the only model id served (/v1/models)
    seed: int = 0  # server seed: EOS points, output words, refusals of unseeded requests
    time_scale: float = 1.0  # multiplies every modelled delay; 0 = no modelled delay
    # --- iteration cost model (§5.1, §5.4, §5.9) --------------------------------------------
    step_ms: float = 8.0  # fixed cost of every engine iteration (weights read, launch overhead)
    decode_per_seq_ms: float = 0.15  # extra cost per sequence decoded in an iteration
    prefill_per_token_ms: float = 0.1  # linear prefill cost per uncached prompt token (a)
    prefill_per_token2_ms: float = 3e-6  # attention term b: chunk [s,e) costs b*(e^2 - s^2)
    cold_start_ms: float = 0.0  # extra cost of the first iteration after process start (JIT, graph capture; §4.5.3)
    # --- scheduler ----------------------------------------------------------------------------
    max_num_seqs: int = 64  # max sequences in the running batch
    max_num_batched_tokens: int = 2048  # chunked: token budget per iteration; else prefill cap
    chunked_prefill: bool = False  # Sarathi-style mixed decode + prefill-chunk iterations
    max_waiting: int = 1024  # waiting-queue bound; a request arriving when full gets 429
    context_window: int = 32768  # max prompt + max_tokens (400 context_length_exceeded)
    # --- KV cache (§5.5, §5.8) and prefix cache (§5.7) --------------------------------------
    kv_capacity_tokens: int = 32768  # KV cache size in tokens (rounded down to whole blocks)
    block_size: int = 16  # tokens per KV block
    prefix_cache: bool = True  # block-hashed shared-prefix reuse with LRU eviction
    # --- output length ----------------------------------------------------------------------
    eos_mean_tokens: float = 256.0  # mean of the seeded geometric EOS point; 0 = never EOS
    # --- reasoning models (issue 49) ----------------------------------------------------------------
    reasoning: str = "none"  # none | streamed | hidden | tags (REASONING_MODES)
    reasoning_mean_tokens: float = 64.0  # mean of the seeded geometric thinking length (>= 1 token)
    tool_call_tokens: int = 0  # chat: the answer's first N tokens stream as a tool call's arguments
    # --- guardrails (§5.10) ---------------------------------------------------------------------
    guardrails: str = "none"  # none | input | output | full
    guardrail_input_base_ms: float = 5.0  # input filter: fixed delay before queueing
    guardrail_input_per_token_ms: float = 0.01  # input filter: delay per prompt token
    guardrail_output_per_chunk_ms: float = 1.0  # output filter: delay per emitted content chunk
    guardrail_refusal_rate: float = 0.05  # fraction refused by each active filter (seeded)
    # --- delivery (§4.6) ------------------------------------------------------------------------
    tokens_per_chunk: int = 1  # tokens per SSE content chunk
    timing: bool = False  # add llmbench_timing to every response (else opt-in per request)
    graceful_shutdown_s: float = 5.0  # how long SIGTERM waits for open streams

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation / loading
    def validate(self) -> None:
        """Raise :class:`SimConfigError` naming the first invalid field."""
        for f in dataclasses.fields(self):
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            want = _FIELD_TYPES[f.name]
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
                setattr(self, f.name, v)
            if not isinstance(v, want) or (want is int and isinstance(v, bool)):
                raise SimConfigError(f"SimConfig.{f.name} must be {want.__name__}, got {v!r}")
            if want is float and (math.isnan(v) or v < 0):
                raise SimConfigError(f"SimConfig.{f.name} must be a non-negative number, got {v!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "context_window", "block_size",
                     "tokens_per_chunk"):
            if getattr(self, name) < 1:
                raise SimConfigError(f"SimConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_waiting < 0:
            raise SimConfigError(f"SimConfig.max_waiting must be >= 0, got {self.max_waiting!r}")
        if self.kv_capacity_tokens < self.block_size:
            raise SimConfigError(
                f"SimConfig.kv_capacity_tokens ({self.kv_capacity_tokens}) must hold at least one "
                f"block of block_size={self.block_size} tokens")
        if self.reasoning not in REASONING_MODES:
            raise SimConfigError(
                f"SimConfig.reasoning must be one of {', '.join(REASONING_MODES)}, got {self.reasoning!r}")
        if self.tool_call_tokens < 0:
            raise SimConfigError(f"SimConfig.tool_call_tokens must be >= 0, got {self.tool_call_tokens!r}")
        if self.guardrails not in GUARDRAIL_MODES:
            raise SimConfigError(
                f"SimConfig.guardrails must be one of {', '.join(GUARDRAIL_MODES)}, got {self.guardrails!r}")
        if not 0.0 <= self.guardrail_refusal_rate <= 1.0:
            raise SimConfigError(
                f"SimConfig.guardrail_refusal_rate must be in [0, 1], got {self.guardrail_refusal_rate!r}")
        if not self.model_name:
            raise SimConfigError("SimConfig.model_name must not be empty")

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SimConfig:
        unknown = sorted(set(d) - set(_FIELD_TYPES))
        if unknown:
            raise SimConfigError(f"unknown SimConfig field(s): {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | Path) -> SimConfig:
        """Load a ``.toml`` or ``.json`` file (a TOML file may put the fields under ``[simulator]``)."""
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise SimConfigError(f"cannot read simulator config file {str(p)!r}: {exc}") from exc
        try:
            if p.suffix.lower() == ".json":
                d = json.loads(raw)
            else:
                d = tomllib.loads(raw.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise SimConfigError(f"simulator config file {str(p)!r} is not valid: {exc}") from exc
        if isinstance(d, dict) and isinstance(d.get("simulator"), dict):
            d = d["simulator"]
        if not isinstance(d, dict):
            raise SimConfigError(f"simulator config file {str(p)!r} must hold a table/object of fields")
        return cls.from_dict(d)

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with ``changes`` applied (validated)."""
        return SimConfig.from_dict({**self.to_json(), **changes})

    # ------------------------------------------------------------------ derived quantities
    @property
    def kv_blocks_total(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def prefill_chunk_ms(self, start: int, end: int) -> float:
        """Model cost of computing KV for prompt positions [start, end): a*(e-s) + b*(e^2-s^2)."""
        return self.prefill_per_token_ms * (end - start) + self.prefill_per_token2_ms * (end * end - start * start)

    def iteration_ms(self, n_decode: int, prefill_ms: float = 0.0) -> float:
        """Model duration of one iteration decoding ``n_decode`` sequences plus a prefill part."""
        return self.step_ms + self.decode_per_seq_ms * n_decode + prefill_ms

    # ------------------------------------------------------------------ predictions (real s)
    def predicted_prefill_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill compute for a prompt whose first ``cached_tokens`` are served by the prefix cache."""
        c = min(cached_tokens, prompt_tokens)
        return self.prefill_chunk_ms(c, prompt_tokens) * self.time_scale / 1000.0

    def prefill_iterations(self, prompt_tokens: int, cached_tokens: int = 0) -> int:
        """Iterations a lone request's prefill takes (1 without chunked prefill)."""
        todo = max(prompt_tokens - cached_tokens, 1)
        return -(-todo // self.max_num_batched_tokens) if self.chunked_prefill else 1

    def predicted_ttft_s(self, prompt_tokens: int, cached_tokens: int = 0, *,
                         guardrail: bool = True) -> float:
        """Server-side TTFT of a lone request on an idle server (§5.1): iterations' fixed costs +
        prefill compute (+ the input guardrail delay when that filter is active)."""
        n = self.prefill_iterations(prompt_tokens, cached_tokens)
        s = (n * self.step_ms) * self.time_scale / 1000.0 + self.predicted_prefill_s(prompt_tokens, cached_tokens)
        if guardrail:
            s += self.predicted_input_guardrail_s(prompt_tokens)
        return s

    def predicted_cold_start_s(self) -> float:
        """Extra time the first iteration after a (re)start takes (§4.5.3 cold start)."""
        return self.cold_start_ms * self.time_scale / 1000.0

    def predicted_itl_s(self, batch_size: int) -> float:
        """Steady decode inter-token latency with ``batch_size`` sequences decoding (§5.4)."""
        return self.iteration_ms(batch_size) * self.time_scale / 1000.0

    def predicted_output_throughput(self, batch_size: int) -> float:
        """Output tokens/s of a steady decode batch (§5.2); inf when time_scale is 0."""
        itl = self.predicted_itl_s(batch_size)
        return math.inf if itl == 0 else batch_size / itl

    def predicted_max_itl_s(self, prompt_tokens: int, batch_size: int) -> float:
        """Worst inter-token gap a running request of a ``batch_size`` batch sees when a
        ``prompt_tokens`` prompt arrives (§5.4): without chunked prefill one decode iteration plus
        a whole prefill-only iteration; with it the costliest mixed iteration (the last chunk).
        The arriving request is assumed to join the batch (``batch_size + 1`` decode afterwards)."""
        if not self.chunked_prefill:
            ms = self.iteration_ms(batch_size + 1) + self.iteration_ms(0, self.prefill_chunk_ms(0, prompt_tokens))
        else:
            budget = max(self.max_num_batched_tokens - batch_size, 1)
            n_full = (prompt_tokens - 1) // budget  # chunks are cut from the front
            start = n_full * budget
            worst = self.prefill_chunk_ms(start, prompt_tokens)
            if n_full:
                worst = max(worst, self.prefill_chunk_ms(start - budget, start))
            ms = self.iteration_ms(batch_size, worst)
        return ms * self.time_scale / 1000.0

    def kv_capacity_requests(self, input_tokens: int, output_tokens: int) -> int:
        """Most requests of this shape whose whole sequence fits in the KV cache at once (§5.5)."""
        per = self.blocks_for(input_tokens + output_tokens)
        return min(self.max_num_seqs, self.kv_blocks_total // max(per, 1))

    def guardrail_active(self, which: str) -> bool:
        return self.guardrails == "full" or self.guardrails == which

    def predicted_input_guardrail_s(self, prompt_tokens: int) -> float:
        """Delay the input filter adds before queueing (0 when it is off) (§5.10)."""
        if not self.guardrail_active("input"):
            return 0.0
        ms = self.guardrail_input_base_ms + self.guardrail_input_per_token_ms * prompt_tokens
        return ms * self.time_scale / 1000.0

    def predicted_output_guardrail_s(self, chunks: int = 1) -> float:
        """Delay the output filter adds to ``chunks`` content chunks (0 when it is off) (§5.10)."""
        if not self.guardrail_active("output"):
            return 0.0
        return chunks * self.guardrail_output_per_chunk_ms * self.time_scale / 1000.0


_FIELD_TYPES: dict[str, type] = {}
for _f in dataclasses.fields(SimConfig):
    if not _f.name.startswith("_"):
        _FIELD_TYPES[_f.name] = {"str": str, "int": int, "float": float, "bool": bool}[str(_f.type)]


def guardrail_defaults() -> dict[str, Any]:
    """The default value of every guardrail setting (:data:`GUARDRAIL_SETTINGS`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(SimConfig)}
    return {k: defaults[k] for k in GUARDRAIL_SETTINGS}
