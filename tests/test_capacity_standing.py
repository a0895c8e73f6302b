"""Capacity bases that mean what they say (issue 48 E, fidelity-audit-3 finding 1).

A capacity carries whether it is a measurement or a bound (``standing``: measured, lower-bound,
declared), with the workload and request shape it was measured on; a procedure taking a fraction of a
bound, or of a capacity measured on another request shape, says so in its verdict.
"""

from __future__ import annotations

import jsonschema

from pytest_llmbench.compliance import Status, decide
from pytest_llmbench.document.schema import schema
from pytest_llmbench.procedures.capacity import FORCED_OUTPUT, FREE_OUTPUT
from pytest_llmbench.procedures.result import Capacity


def test_a_capacity_states_its_standing_workload_and_shape_in_results_json() -> None:
    cap = Capacity(rate=12.0, source="measured by 5.2 in this session", standing="lower-bound",
                   workload="synthetic-uniform", request_shape=FREE_OUTPUT)
    d = cap.to_json()
    assert (d["standing"], d["workload"], d["request_shape"]) == ("lower-bound", "synthetic-uniform", FREE_OUTPUT)
    validator = jsonschema.Draft202012Validator(schema()["$defs"]["capacity"] | {"$defs": schema()["$defs"]})
    validator.validate(d)
    assert not validator.is_valid({**d, "standing": "guessed"})


def test_5_3_on_a_lower_bound_is_unmet_not_a_silent_met() -> None:
    """5.3.3-PARAM-1 was a literal ok=True whatever the capacity was."""
    met = decide("5.3.3-PARAM-1", rate=10.0, source="5.2", standing="measured", shape=FREE_OUTPUT,
                 own_shape=FREE_OUTPUT)
    assert met.holds and met.source == "measured"
    bound = decide("5.3.3-PARAM-1", rate=10.0, source="5.2", standing="lower-bound", shape=FREE_OUTPUT,
                   own_shape=FREE_OUTPUT)
    assert bound.status is Status.UNMET and "lower bound" in bound.reason
    declared = decide("5.3.3-PARAM-1", rate=10.0, source="declared (--llm-capacity)", standing="declared")
    assert declared.holds and declared.source == "declared"


def test_5_4_on_a_capacity_of_another_request_shape_is_unmet() -> None:
    """5.4 forces its outputs; 5.2's rate was measured on outputs that may stop at EOS."""
    c = decide("5.4.2-PARAM-2", rate=10.0, source="measured by 5.2", standing="measured", shape=FREE_OUTPUT,
               own_shape=FORCED_OUTPUT)
    assert c.status is Status.UNMET and "another load" in c.reason
    own = decide("5.4.2-PARAM-2", rate=10.0, source="5.4's own search", standing="measured", shape=FORCED_OUTPUT,
                 own_shape=FORCED_OUTPUT)
    assert own.holds



def test_5_1_at_a_fraction_of_a_lower_bound_needs_a_declaration(harness) -> None:
    """Issue 48 (e): 5.1's default capacity_fraction=0.5 of a capacity whose standing is lower-bound was
    a silent met of 5.1.2-MUST-6 (a rate existed); now the item needs a declaration, naming the bound."""
    import asyncio

    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.simulator import SimConfig

    proc = get_procedure("5.1")
    params = proc.make_params("smoke", {"requests": 20, "warmup_requests": 5, "warmup_tokens": 50,
                                        "warmup_probes": 0, "max_output_tokens": 4})
    cfg = SimConfig(time_scale=0.05, seed=3)
    found = {}
    for standing in ("lower-bound", "measured"):
        cap = Capacity(rate=40.0, source="measured by 5.2 in this session", standing=standing,
                       workload="synthetic-uniform", request_shape=FREE_OUTPUT)
        with harness(cfg, capacity=cap, profile="smoke", seed=4) as (_sim, ctx):
            found[standing] = asyncio.run(proc.run(ctx, params)).checks["5.1.2-MUST-6"]
    bound, measured = found["lower-bound"], found["measured"]
    assert bound.status is Status.NEEDS_DECLARATION and "lower bound" in bound.reason
    assert "20 req/s = 0.5 x capacity 40 req/s (lower-bound" in bound.reason and bound.key == "5.1.2-MUST-6"
    assert measured.holds and "(measured: measured by 5.2 in this session)" in measured.reason
