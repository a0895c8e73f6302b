"""Server adapters against response bodies written from each server's documented formats
(tests/data/servers/*.json, versions named in each file's ``_source``); llama.cpp is also tested
live in tests/test_real_sut.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.client import ClientConfig, build_body
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.measure.telemetry import read_exposition, read_roles
from pytest_llmbench.options import SERVER_KINDS
from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.system import SUT

FIXTURES = sorted((Path(__file__).parent / "data" / "servers").glob("*.json"))


def fake_fetch(responses: dict[str, Any]) -> adapters.Fetch:
    def fetch(path: str) -> tuple[int, Any]:
        body = responses.get(path, 404)
        return (body, None) if isinstance(body, int) else (200, body)
    return fetch


def first(metrics: dict[str, float], role: str) -> float | None:
    return next((metrics[n] for n in adapters.metric_names(role) if n in metrics), None)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_detects_kind_and_describes(path: Path) -> None:
    fx = json.loads(path.read_text())
    fetch = fake_fetch(fx["responses"])
    adapter, evidence = adapters.detect(fetch)
    assert adapter.kind == fx["kind"], evidence
    info = adapter.describe(fetch)
    for key in ("version", "context_window"):
        if key in fx["expect"]:
            assert info[key] == fx["expect"][key]
    assert "/home/u" not in json.dumps(info)  # host paths reduced to file names


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_detects_without_owned_by(path: Path) -> None:
    """Servers behind a proxy that rewrites /v1/models are still recognised from native endpoints."""
    fx = json.loads(path.read_text())
    responses = dict(fx["responses"])
    responses["/v1/models"] = {"object": "list", "data": [{"id": "m", "object": "model"}]}
    adapter, evidence = adapters.detect(fake_fetch(responses))
    expected = fx["kind"] if fx["kind"] != "openai" else "openai-compatible"  # OpenAI has no native endpoint
    assert adapter.kind == expected, evidence


@pytest.mark.parametrize("path", [p for p in FIXTURES if json.loads(p.read_text())["metrics"]], ids=lambda p: p.stem)
def test_metric_roles(path: Path) -> None:
    fx = json.loads(path.read_text())
    page = read_exposition(fx["metrics"])
    metrics = {name: sum(by.values()) for name, (_, by) in page.items()}
    for role in adapters.METRIC_ROLES:
        if role in fx["expect"]:
            assert first(metrics, role) == fx["expect"][role], role
    # the telemetry sampler reads the same values through the server kind's names
    roles = read_roles(page, adapters.telemetry_names(adapters.get_adapter(fx["kind"])))
    assert {r: v for r, (_, _, v) in roles.items() if r in fx["expect"]} == {
        r: v for r, v in fx["expect"].items() if r in adapters.METRIC_ROLES}
    # the warm-up's queue drain reads the same names (loadgen/warmup.queue_depth)
    assert any(n in metrics for n in adapters.metric_names("waiting"))
    assert any(n in metrics for n in adapters.metric_names("running"))


def test_vllm_both_kv_cache_gauges_known() -> None:
    names = adapters.metric_names("kv_usage")
    assert "vllm:kv_cache_usage_perc" in names and "vllm:gpu_cache_usage_perc" in names
    assert adapters.metric_names("preemptions") == ("llmbench:num_preemptions_total", "vllm:num_preemptions_total")


def test_kinds_option_matches_registry() -> None:
    assert set(SERVER_KINDS) == set(adapters.KINDS)
    assert adapters.get_adapter("llamacpp").kind == "llama.cpp"
    with pytest.raises(ValueError, match="unknown server kind 'tgi'"):
        adapters.get_adapter("tgi")
    with pytest.raises(ValueError, match="unknown metric role"):
        adapters.metric_names("nope")


def test_openai_gets_no_engine_extensions() -> None:
    assert not {"ignore_eos", "min_tokens"} & set(adapters.get_adapter("openai").honours)
    assert {"ignore_eos", "min_tokens"} <= set(adapters.get_adapter("vllm").honours)


def test_llamacpp_prefix_cache_switch_reaches_every_body() -> None:
    """The switch lands in the SUT's live extra_body mapping, which a client made earlier still reads."""
    sut = SUT(base_url="http://127.0.0.1:9/v1", model="m", server_kind="llama.cpp")
    cfg = ClientConfig(base_url=sut.base_url, model="m", api="completions", extra_body=sut.extra_body)
    spec = RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=4, prompt_text="hi")
    assert "cache_prompt" not in build_body(cfg, spec)
    assert adapters.configure(sut, "prefix_cache", False) is True
    assert build_body(cfg, spec)["cache_prompt"] is False and sut.server_info["prefix_cache"] is False
    assert adapters.configure(sut, "prefix_cache", True) is True
    assert build_body(cfg, spec)["cache_prompt"] is True
    assert adapters.configure(sut, "guardrails", "full") is None  # not a llama.cpp setting
    assert sut.to_json()["server_kind"] == "llama.cpp"


def test_restart_only_for_registered_servers() -> None:
    sut = SUT(base_url="http://127.0.0.1:9/v1", model="m", server_kind="vllm")
    assert adapters.configure(sut, "restart", True) is None  # not started by this process
    calls: list[int] = []
    adapters.register_restart(sut.root_url, lambda: calls.append(1))
    try:
        assert adapters.configure(sut, "restart", True) is True
    finally:
        adapters.unregister_restart(sut.root_url)
    assert calls == [1]
    assert adapters.configure(sut, "restart", True) is None


def test_simulator_restart_is_a_new_process_on_the_same_port() -> None:
    from pytest_llmbench.simulator.config import SimConfig
    from pytest_llmbench.simulator.process import start_simulator

    with start_simulator(SimConfig(time_scale=0.05)) as sim:
        pid, port = sim.pid, sim.port
        sim.set_config(prefix_cache=False)
        sim.restart()
        assert sim.alive() and sim.pid != pid and sim.port == port
        assert sim.get_config()["prefix_cache"] is False  # restarted with the config in force


def test_identify_server_override_and_detection_on_a_live_http_server() -> None:
    from pytest_llmbench.simulator.config import SimConfig
    from pytest_llmbench.simulator.process import start_simulator
    from pytest_llmbench.sut.system import EndpointError, identify_server

    with start_simulator(SimConfig(time_scale=0.05)) as sim:
        sut = SUT(base_url=sim.base_url, model="m")  # as if it were a real endpoint
        identify_server(sut)
        assert sut.server_kind == "openai-compatible" and sut.send_extra_fields
        declared = SUT(base_url=sim.base_url, model="m")
        identify_server(declared, "openai")
        assert (declared.server_kind, declared.server_kind_source) == ("openai", "declared (--llm-server-kind)")
        assert declared.send_extra_fields is False  # OpenAI rejects ignore_eos / min_tokens
        with pytest.raises(EndpointError, match="--llm-server-kind: unknown server kind 'tgi'"):
            identify_server(SUT(base_url=sim.base_url, model="m"), "tgi")
    embedded = SUT(base_url="http://127.0.0.1:9/v1", model="m", embedded=True)
    identify_server(embedded)
    assert embedded.server_kind == "llmbench-simulator"
