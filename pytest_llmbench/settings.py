"""Effective run settings: command-line options, environment variables and ini keys, validated.

Precedence (like pytest-timeout): marker > command line > environment > ini > default. A bad value
raises :class:`LLMBenchConfigError` naming where it came from (e.g. ``--llm-profile``,
``LLMBENCH_PROFILE`` environment variable, ``ini llm_profile``); the plugin turns it into a
``LLMBenchConfigError``. Markers override per test (procedures/base.py). Option registration with
pytest lives in the glue (options.py); nothing here imports pytest.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["APIS", "BOUNDARIES", "EXPORTS", "INCONCLUSIVE_OUTCOMES", "LLMBenchConfigError", "OPTIONS", "Option", "PROFILES", "Settings",
           "parse_capacity", "resolve"]

BOUNDARIES = ("model-engine", "gateway", "compound")
PROFILES = ("smoke", "standard", "full")
APIS = ("completions", "chat")
#: ``--llm-inconclusive``: the pytest outcome of an INCONCLUSIVE SLO verdict (issue 47)
INCONCLUSIVE_OUTCOMES = ("fail", "pass", "skip")
#: ``--llm-trace-format``: the trace formats workloads/trace.py reads (its TRACE_FORMATS)
TRACE_FORMATS = ("mooncake", "bailian")
#: ``--llm-sim-reasoning``: how the embedded simulator's model thinks (simulator.config.REASONING_MODES).
SIM_REASONING = ("none", "streamed", "hidden", "tags")


class LLMBenchConfigError(ValueError):
    """A bad setting; the message starts with where the value came from (``--llm-timeout: ...``)."""


@dataclass(frozen=True)
class Option:
    """One setting: CLI flag ``--llm-<name>``, ini key ``llm_<name>``, env ``LLMBENCH_<NAME>``."""

    name: str
    help: str
    default: Any = None
    kind: str = "str"  # str | int | float | bool | path | list | choice | optional (flag with optional value)
    choices: tuple[str, ...] = ()  # a choice without them has its choices passed to resolve() (server-kind)

    @property
    def flag(self) -> str:
        return "--llm-" + self.name

    @property
    def ini(self) -> str:
        return "llm_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "LLMBENCH_" + self.name.replace("-", "_").upper()

    @property
    def dest(self) -> str:
        return "llm_" + self.name.replace("-", "_")


#: the endpoint that asks for the embedded simulator spoken to over gRPC
EMBEDDED_GRPC = "grpc://embedded"
GRPC_SCHEMES = ("grpc://", "grpcs://")
#: the packages a gRPC endpoint needs (module -> distribution), and the extra that brings them
_GRPC_MODULES = (("grpc", "grpcio"), ("smg_grpc_proto", "smg-grpc-proto"))
GRPC_EXTRA = "pip install 'pytest-llmbench[grpc]'"


def grpc_missing() -> str | None:
    """What a gRPC endpoint lacks here (the packages not installed and the extra that brings them), or
    None when it can be used. Looks the packages up without importing them (the SSE path never does)."""
    missing = [dist for mod, dist in _GRPC_MODULES if importlib.util.find_spec(mod) is None]
    return f"the grpc extra ({', '.join(missing)} not installed): {GRPC_EXTRA}" if missing else None


SMOKE_MAX_DURATION_S = 60.0  # the smoke profile's default time budget per procedure

OPTIONS: tuple[Option, ...] = (
    Option("endpoint", "OpenAI-compatible base URL, e.g. http://host:8000/v1, or a gRPC endpoint grpc://host:port "
           "(grpcs:// with TLS; needs pytest-llmbench[grpc]); grpc://embedded: the embedded simulator over gRPC "
           "(default: start the embedded simulator on 127.0.0.1)"),
    Option("model", "model name to request (default: the first model the endpoint lists)"),
    Option("api", "API to drive: completions or chat", "completions", "choice", APIS),
    Option("profile", "parameter profile: smoke (quick, below the draft's minimums), standard (the draft's "
           "minimums), full (the draft's recommended values)", "smoke", "choice", PROFILES),
    Option("seed", "workload and arrival seed (§4.3.3)", 42, "int"),
    Option("report", "directory for reports and run records", "llmbench-report", "path"),
    Option("tokenizer", "reference tokenizer: cl100k_base or hf:/path/to/tokenizer.json (§4.4)", "cl100k_base"),
    Option("boundary", "SUT boundary (§4.1): model-engine, gateway or compound; required for a real "
           "endpoint, model-engine for the embedded simulator", None, "choice", BOUNDARIES),
    Option("api-key-env", "NAME of the environment variable holding the API key (never the key itself)"),
    Option("capacity", "declared capacity for capacity-relative procedures, e.g. 'concurrency=32' or "
           "'rate=12.5' (req/s); default: measured by 5.5/5.2 in the same session"),
    Option("slo", "SLO applied to every llmbench test, e.g. 'ttft.p99<=500ms' (repeatable; ini: one per line)",
           None, "list"),
    Option("declarations", "TOML/YAML file of tester declarations (hardware, model version, ...)", None, "path"),
    Option("insecure", "do not verify TLS certificates (recorded in the report)", False, "bool"),
    Option("timeout", "per-request timeout in seconds: the whole request, and the longest wait for its first "
           "byte or between two reads", 300.0, "float"),
    Option("time-scale", "embedded simulator: factor applied to every modelled delay", 0.25, "float"),
    Option("sim-config", "embedded simulator: TOML/JSON configuration file", None, "path"),
    Option("sim-reasoning", "embedded simulator: the model thinks before it answers: streamed (reasoning deltas), "
           "hidden (usage counts the thinking, nothing streams) or tags (<think> in the content; the client then "
           "splits it off); none: no thinking (docs/metrics.md 'Reasoning models')", None, "choice", SIM_REASONING),
    Option("think-tags", "the model writes its reasoning as <think>...</think> inside the content (a server without "
           "a reasoning parser): the client splits it off into the thinking phase; TTFT is then the first content "
           "token after it (§5.1.3.1)", False, "bool"),
    Option("strict-sampling", "fail SLOs on under-sampled percentiles (§5.1.4.3)", False, "bool"),
    Option("slo-confidence", "confidence an SLO's verdict is judged at (PASS or FAIL only when a one-sided bound "
           "at it lies on one side of the threshold, else INCONCLUSIVE; docs/slo-and-compliance.md), in [0.5, 1)",
           0.95, "float"),
    Option("stop-when-decided", "end a single-run procedure's measured run (5.1) once every SLO known before it "
           "(marker and --llm-slo) is PASS or FAIL, at a fixed schedule of looks; the run is then unmet on its "
           "request count (docs/slo-and-compliance.md 'Stopping when decided'). Searches and sweeps ignore it",
           False, "bool"),
    Option("inconclusive", "outcome of a test whose SLO is INCONCLUSIVE (not shown to hold nor not to): fail, "
           "pass (with a warning) or skip (with the reason)", "fail", "choice", INCONCLUSIVE_OUTCOMES),
    Option("drop-text", "do not keep prompt/completion text in stored records", False, "bool"),
    Option("workers", "load-generator processes per measured run: N, or auto (cores - 1); 1 = in-process "
           "(shards/, README 'When one machine is not enough')", "1"),
    Option("ray-address", "run load-generator shards as Ray actors: auto (running cluster), local (start one "
           "here) or a cluster address; needs pytest-llmbench[ray]"),
    # its choices are the server adapters' kinds (sut/adapters, a layer above): options.py passes them
    Option("server-kind", "server kind instead of detecting it (sut/adapters/; openai-compatible: an unrecognised "
           "server)", None, "choice"),
    Option("max-duration", "time budget per procedure in seconds (warm-up, measurement and drain); runs are "
           "cut to fit and every reduction below a draft minimum is reported unmet. Default: "
           f"{SMOKE_MAX_DURATION_S:g} s in the smoke profile, none otherwise; 0 = no budget", None, "float"),
    Option("dry-run", "print each selected procedure's planned request count and minimum duration, send "
           "nothing", False, "bool"),
    # regression gate (§6, docs/regression-gate.md)
    Option("autosave", "store this session's results under --llm-storage (counter_commit_time)", False, "bool"),
    Option("save", "store this session's results under --llm-storage as NAME (0001_NAME)"),
    Option("storage", "directory of stored runs for --llm-save/--llm-autosave/--llm-compare", ".llmbench", "path"),
    Option("compare", "compare each test's procedure with the same test in a stored run: counter, NAME, PATH "
           "or 'latest' (the default when given without a value)", None, "optional"),
    Option("compare-fail", "fail rule for --llm-compare, e.g. 'tpot.p50:10%' or 'e2e.p99:50ms' (repeatable; ini: "
           "one per line)", None, "list"),
    Option("compare-force", "compare runs that were not measured the same way (§6.1; recorded in the report)",
           False, "bool"),
    Option("runs", "repeat each procedure N times in the session (§6.3: at least 3 for across-run CIs)", 1, "int"),
    Option("runs-cooldown", "seconds of idle time between repetitions of --llm-runs", 0.0, "float"),
    Option("http-trace", "record each request's HTTP phases (blocked, DNS, connecting, sending, waiting/TTFB, "
           "receiving; aiohttp transport) as the http_* metrics (AIPerf http_req_*)", False, "bool"),
    Option("refusal-pattern", "regular expression: a completion whose text matches it counts as refused "
           "(§4.8.1; besides content_filter, policy error codes and the refusal field, refusals.py)"),
    Option("refusal-codes", "extra error codes of HTTP 400/403/422 answers that count as refusals (repeatable or "
           "comma-separated; §4.8.1)", None, "list"),
    Option("cold-start", "5.1: restart the SUT through the configure_sut hook's 'restart' setting and measure the "
           "first requests before any warm-up against the same requests warm (§4.5.3)", False, "bool"),
    Option("telemetry-interval", "seconds between two scrapes of the server's Prometheus /metrics during every "
           "warm-up and measured run (measure/telemetry.py); 0 = only before and after each run", 0.25, "float"),
    # the user's datasets (App. A.3, A.4; docs/workloads.md "Your own datasets"): one block
    Option("dataset", "the user's dataset file for a workload, NAME=PATH: conversation=sharegpt.json (ShareGPT "
           "JSON/JSONL) or code-completion=code.jsonl (or a directory of .py/.js/.ts files); every procedure on that "
           "workload reads it unless its marker gives dataset= (repeatable; ini: one per line)", None, "list"),
    Option("dataset-version", "the version of a --llm-dataset file, NAME=TEXT, e.g. conversation=\"vicuna_cleaned "
           "2023-04-12\" (§4.3.3; with the A.3.2 statistics it identifies the draft's file) (repeatable)", None,
           "list"),
    Option("export", "extra export of every measured run: 'aiperf' writes AIPerf's profile_export files to "
           "<run dir>/aiperf (repeatable or comma-separated)", None, "list"),
    # trace replay (issue 50, docs/workloads.md "Trace replay"): one block
    Option("trace", "replay a trace (Mooncake JSON Lines: timestamp ms, input_length, output_length, hash_ids) as "
           "5.1's measured run: its requests at their times, instead of the marker's load and request count",
           None, "path"),
    Option("trace-format", "the trace's format (default: bailian when its first line has chat_id, else mooncake)",
           None, "choice", TRACE_FORMATS),
    Option("trace-speedup", "divide the trace's send offsets by this factor (2: twice as fast)", 1.0, "float"),
    Option("trace-limit", "replay the trace's first N requests only", None, "int"),
    Option("trace-block-size", "tokens per hash id of the trace (default: the format's, 512 for mooncake, 16 for "
           "bailian)", None, "int"),
)

#: Formats ``--llm-export`` accepts.
EXPORTS = ("aiperf",)


@dataclass
class Settings:
    """The effective settings of a session, with where each value came from."""

    endpoint: str | None = None
    model: str | None = None
    api: str = "completions"
    profile: str = "smoke"
    seed: int = 42
    report: Path = Path("llmbench-report")
    tokenizer: str = "cl100k_base"
    boundary: str | None = None
    api_key_env: str | None = None
    capacity: str | None = None
    slo: list[str] = field(default_factory=list)
    declarations: Path | None = None
    insecure: bool = False
    timeout: float = 300.0
    time_scale: float = 0.25
    sim_config: Path | None = None
    sim_reasoning: str | None = None  # the embedded simulator's SimConfig.reasoning (None: its config's)
    think_tags: bool = False  # the client splits <think>...</think> off the content (client/phases.py)
    strict_sampling: bool = False
    slo_confidence: float = 0.95  # an SLO verdict's confidence unless the SLO names its own (measure/slo.py)
    inconclusive: str = "fail"  # pytest outcome of an INCONCLUSIVE SLO: fail | pass | skip
    stop_when_decided: bool = False  # 5.1's measured run ends once its SLOs are settled (issue 47)
    drop_text: bool = False
    workers: str = "1"
    ray_address: str | None = None
    dry_run: bool = False
    http_trace: bool = False
    telemetry_interval: float = 0.25  # s between /metrics scrapes (measure/telemetry.py); 0: before/after only
    export: list[str] = field(default_factory=list)
    dataset: list[str] = field(default_factory=list)  # --llm-dataset NAME=PATH lines (workloads.datasets)
    dataset_version: list[str] = field(default_factory=list)  # --llm-dataset-version NAME=TEXT lines
    max_duration: float | None = None  # seconds per procedure; None or 0: no budget
    refusal_pattern: str | None = None  # declared refusal text (refusals.py, §4.8.1)
    refusal_codes: list[str] = field(default_factory=list)  # extra policy error codes (§4.8.1)
    cold_start: bool = False  # 5.1 measures cold start after a SUT restart (§4.5.3)
    server_kind: str | None = None
    autosave: bool = False
    save: str | None = None
    storage: Path = Path(".llmbench")
    compare: str | None = None
    compare_fail: list[str] = field(default_factory=list)
    compare_force: bool = False
    runs: int = 1
    runs_cooldown: float = 0.0
    trace: Path | None = None  # a trace replayed as 5.1's measured run (workloads/trace.py, issue 50)
    trace_format: str | None = None  # None: detected from the file
    trace_speedup: float = 1.0
    trace_limit: int | None = None
    trace_block_size: int | None = None  # None: the format's
    sources: dict[str, str] = field(default_factory=dict)
    rootdir: Path | None = None  # pytest's rootdir: where [tool.llmbench.declarations] is looked up

    @property
    def embedded(self) -> bool:
        """True when no endpoint was given (or ``grpc://embedded``): the embedded simulator is the SUT."""
        return not self.endpoint or self.endpoint == EMBEDDED_GRPC

    @property
    def grpc(self) -> bool:
        """True when requests go over gRPC (a ``grpc://``/``grpcs://`` endpoint, §4.6.1, App. B.1.2)."""
        return bool(self.endpoint) and self.endpoint.startswith(GRPC_SCHEMES)  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["report"] = str(self.report)
        d["declarations"] = str(self.declarations) if self.declarations else None
        d["sim_config"] = str(self.sim_config) if self.sim_config else None
        d["rootdir"] = str(self.rootdir) if self.rootdir else None
        d["storage"] = str(self.storage)
        d["trace"] = str(self.trace) if self.trace else None
        return d


def _convert(opt: Option, raw: Any, where: str, choices: Sequence[str] = ()) -> Any:
    try:
        if opt.kind == "int":
            return int(raw)
        if opt.kind == "float":
            value = float(raw)
            if value < 0:
                raise ValueError("must not be negative")
            return value
        if opt.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError("expected true/false")
        if opt.kind == "path":
            return Path(str(raw)).expanduser()
        if opt.kind == "list":
            if isinstance(raw, str):
                return [s.strip() for s in raw.splitlines() if s.strip()]
            return [str(s) for s in raw]
        if opt.kind == "choice":
            text = str(raw).strip().lower().replace("_", "-")
            aliases = {"engine": "model-engine", "application-gateway": "gateway", "compound-system": "compound"}
            text = aliases.get(text, text)
            allowed = opt.choices or choices
            if allowed and text not in allowed:
                raise ValueError(f"{raw!r} is not one of {', '.join(allowed)}")
            return text
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise LLMBenchConfigError(f"{where}: invalid value {raw!r} for {opt.name}: {exc}") from None


def resolve(
    getoption: Callable[[str], Any],
    getini: Callable[[str], Any],
    environ: dict[str, str] | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
) -> Settings:
    """Resolve every option by precedence CLI > environment > ini > default.

    ``choices``: option name -> the choices a layer above supplies (``server-kind``: the adapters'
    kinds, from options.py); a choice option given none is checked where it is used.
    """
    environ = dict(os.environ) if environ is None else environ
    choices = choices or {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        attr = opt.name.replace("-", "_")
        cli = getoption(opt.dest)
        ini = getini(opt.ini)
        if cli not in (None, []):
            raw, where = cli, opt.flag
        elif opt.env in environ and environ[opt.env] != "":
            raw, where = environ[opt.env], f"{opt.env} environment variable"
        elif ini not in (None, "", [], False):
            raw, where = ini, f"ini {opt.ini}"
        else:
            if opt.default is not None:
                values[attr] = _convert(opt, opt.default, "default", choices.get(opt.name, ()))
            sources[attr] = "default"
            continue
        values[attr] = _convert(opt, raw, where, choices.get(opt.name, ()))
        sources[attr] = where
    settings = Settings(**values, sources=sources)
    if settings.max_duration is None and settings.profile == "smoke":
        settings.max_duration = SMOKE_MAX_DURATION_S
        sources["max_duration"] = "smoke profile default"
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    if not s.timeout > 0:  # a zero timeout would fail every request, not the configuration
        raise LLMBenchConfigError(f"{s.sources.get('timeout', '--llm-timeout')}: invalid value {s.timeout!r} "
                                  "for timeout: must be > 0 seconds")
    if not (s.telemetry_interval >= 0 and math.isfinite(s.telemetry_interval)):
        raise LLMBenchConfigError(f"{s.sources.get('telemetry_interval', '--llm-telemetry-interval')}: invalid value "
                                  f"{s.telemetry_interval!r} for telemetry-interval: must be >= 0 seconds (0: off)")
    if not 0.5 <= s.slo_confidence < 1.0:
        raise LLMBenchConfigError(f"{s.sources.get('slo_confidence', '--llm-slo-confidence')}: invalid value "
                                  f"{s.slo_confidence!r} for slo-confidence: must be in [0.5, 1), e.g. 0.95")
    if s.max_duration is not None and not s.max_duration >= 0:
        raise LLMBenchConfigError(f"{s.sources.get('max_duration', '--llm-max-duration')}: invalid value "
                                  f"{s.max_duration!r} for max-duration: must be >= 0 seconds (0: no budget)")
    if s.refusal_pattern is not None:
        try:
            re.compile(s.refusal_pattern)
        except re.error as exc:
            raise LLMBenchConfigError(f"{s.sources.get('refusal_pattern', '--llm-refusal-pattern')}: "
                                      f"{s.refusal_pattern!r} is not a regular expression: {exc}") from None
    if s.endpoint is not None:
        if not s.endpoint.startswith(("http://", "https://", *GRPC_SCHEMES)):
            raise LLMBenchConfigError(
                f"{s.sources['endpoint']}: endpoint {s.endpoint!r} must start with http://, https://, grpc:// or "
                "grpcs://"
            )
        s.endpoint = s.endpoint.rstrip("/")
        if s.grpc:
            _validate_grpc(s)
    if s.api_key_env is not None and s.api_key_env not in os.environ:
        raise LLMBenchConfigError(
            f"{s.sources['api_key_env']}: environment variable {s.api_key_env!r} (named as the API key "
            "holder) is not set"
        )
    text = str(s.workers).strip().lower()
    if text != "auto" and not (text.isdigit() and int(text) >= 1):
        raise LLMBenchConfigError(f"{s.sources.get('workers', '--llm-workers')}: invalid value {s.workers!r} for "
                                  "workers: must be a positive integer or 'auto'")
    if s.runs < 1:
        raise LLMBenchConfigError(f"{s.sources.get('runs', '--llm-runs')}: invalid value {s.runs!r} for runs: "
                                  "must be >= 1")
    if s.compare is not None and not s.compare.strip():
        s.compare = "latest"
    if s.capacity is not None:
        parse_capacity(s.capacity, s.sources.get("capacity", "capacity"))
    if s.declarations is not None and not s.declarations.is_file():
        raise LLMBenchConfigError(f"{s.sources['declarations']}: declarations file {s.declarations} not found")
    s.export = [x.strip().lower() for item in s.export for x in item.split(",") if x.strip()]
    bad = [x for x in s.export if x not in EXPORTS]
    if bad:
        raise LLMBenchConfigError(f"{s.sources.get('export', '--llm-export')}: unknown export format "
                                  f"{', '.join(map(repr, bad))}; known: {', '.join(EXPORTS)}")
    if s.sim_config is not None and not s.sim_config.is_file():
        raise LLMBenchConfigError(f"{s.sources['sim_config']}: simulator config {s.sim_config} not found")
    _validate_trace(s)


def _validate_trace(s: Settings) -> None:
    """The trace options' values (the file itself is read at collection, plugin.py)."""
    def bad(attr: str, flag: str, why: str) -> LLMBenchConfigError:
        return LLMBenchConfigError(f"{s.sources.get(attr, flag)}: invalid value {getattr(s, attr)!r} for "
                                   f"{flag[6:]}: {why}")

    if s.trace is not None and not s.trace.is_file():
        raise LLMBenchConfigError(f"{s.sources['trace']}: trace file {s.trace} not found")
    if not (s.trace_speedup > 0 and math.isfinite(s.trace_speedup)):
        raise bad("trace_speedup", "--llm-trace-speedup", "must be > 0")
    if s.trace_limit is not None and s.trace_limit < 1:
        raise bad("trace_limit", "--llm-trace-limit", "must be >= 1")
    if s.trace_block_size is not None and s.trace_block_size < 1:
        raise bad("trace_block_size", "--llm-trace-block-size", "must be >= 1")


def _validate_grpc(s: Settings) -> None:
    """A gRPC endpoint: the extra installed (looked up, not imported), completions, ``host:port``."""
    where = s.sources["endpoint"]
    why = grpc_missing()
    if why is not None:
        raise LLMBenchConfigError(f"{where}: a gRPC endpoint ({s.endpoint}) needs {why}")
    if s.api != "completions":
        raise LLMBenchConfigError(f"{where}: a gRPC endpoint takes completions prompts (text or token ids), not chat "
                                  f"messages: use --llm-api completions (got {s.api!r})")
    if s.http_trace:
        raise LLMBenchConfigError(f"{s.sources.get('http_trace', '--llm-http-trace')}: HTTP timings need an HTTP "
                                  f"endpoint; a gRPC endpoint ({s.endpoint}) has no HTTP phases")
    if s.endpoint == EMBEDDED_GRPC:
        return
    parts = urlsplit(s.endpoint or "")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or parts.path:
        raise LLMBenchConfigError(f"{where}: a gRPC endpoint is grpc://host:port (grpcs:// with TLS) or "
                                  f"{EMBEDDED_GRPC}, got {s.endpoint!r}")


def parse_capacity(text: str, where: str) -> tuple[str, float]:
    """Parse a declared capacity ``concurrency=N`` or ``rate=R`` (req/s)."""
    key, sep, value = text.partition("=")
    key = key.strip().lower()
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not sep or key not in ("concurrency", "rate") or number <= 0:
        raise LLMBenchConfigError(f"{where}: capacity {text!r} must be 'concurrency=N' or 'rate=R' with N, R > 0")
    return key, number
