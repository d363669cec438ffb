"""define_agent, approval policies and define_state."""

from __future__ import annotations

import pytest

from eve_cli import Compaction, Limits, always, define_agent, define_state, never, once
from eve_cli._agent_api import ApprovalPolicy, bind_state, unbind_state
from eve_cli._json import JSONObject


def test_define_agent_defaults_and_dict_forms() -> None:
    config = define_agent(
        model="demo", compaction={"threshold_percent": 0.5}, limits={"tokens_per_session": 10}
    )
    assert config.compaction == Compaction(threshold_percent=0.5)
    assert config.limits == Limits(tokens_per_session=10)
    assert config.mode == "conversation"
    assert config.model_calls_per_step == 1
    assert config.source_line is not None and config.source_file == __file__


@pytest.mark.parametrize("bad", [{"mode": "chat"}, {"model_calls_per_step": 0}])
def test_define_agent_rejects_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        define_agent(**bad)  # type: ignore[arg-type]


def test_policies_decide() -> None:
    assert never().decide({}, approved_before=False) == "approved"
    assert always().decide({}, approved_before=False) == "user-approval"
    assert once().decide({}, approved_before=False) == "user-approval"
    assert once().decide({}, approved_before=True) == "approved"
    def over_five(args: JSONObject) -> str:
        n = args["n"]
        return "denied" if isinstance(n, int) and n > 5 else "approved"

    big = ApprovalPolicy("callable", over_five)
    assert big.decide({"n": 9}, approved_before=False) == "denied"
    assert big.decide({"n": 1}, approved_before=False) == "approved"
    odd = ApprovalPolicy("callable", lambda args: "maybe")
    with pytest.raises(ValueError, match="maybe"):
        odd.decide({}, approved_before=False)


def test_state_only_inside_a_tool_and_updates_bound_values() -> None:
    counter = define_state("counter", 0)
    with pytest.raises(RuntimeError, match="counter"):
        counter.get()
    values: dict[str, object] = {}
    token = bind_state(values)
    try:
        assert counter.get() == 0
        assert counter.update(lambda n: n + 2) == 2
    finally:
        unbind_state(token)
    assert values == {"counter": 2}
