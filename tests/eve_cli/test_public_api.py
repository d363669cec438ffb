"""The public surface of eve_cli changes only on purpose."""

import eve_cli


def test_all_is_pinned() -> None:
    assert sorted(eve_cli.__all__) == [
        "AgentConfig",
        "ApprovalPolicy",
        "Compaction",
        "Limits",
        "State",
        "ToolContext",
        "__version__",
        "always",
        "define_agent",
        "define_state",
        "never",
        "once",
        "tool",
    ]
    for name in eve_cli.__all__:
        assert hasattr(eve_cli, name), name
