"""The public surface of eve_cli changes only on purpose."""

import eve_cli


def test_all_is_pinned() -> None:
    assert sorted(eve_cli.__all__) == [
        "AgentConfig",
        "ApprovalPolicy",
        "Compaction",
        "Limits",
        "ModelReference",
        "ModelSettings",
        "State",
        "ToolContext",
        "__version__",
        "always",
        "define_agent",
        "define_schedule",
        "define_state",
        "never",
        "once",
        "tool",
    ]
    for name in eve_cli.__all__:
        assert hasattr(eve_cli, name), name


def test_testing_helpers_are_pinned_and_work(tmp_path: object) -> None:
    import asyncio
    from pathlib import Path

    from eve_cli import testing

    assert sorted(testing.__all__) == [
        "CaseRun", "Divergence", "call", "chat", "eval_case", "expect", "memory_runtime",
        "replay_cassette", "reply", "run_eval_case", "write_script",
    ]  # fmt: skip
    model = testing.write_script(Path(str(tmp_path)) / "s.json", [testing.reply("hello")])
    rt = testing.memory_runtime(model=model)

    async def main() -> None:
        sid = await rt.create_session()
        view = await testing.chat(rt, sid, "hi")
        assert view["turns"][0]["steps"][0]["text"] == "hello"

    asyncio.run(main())


def test_evals_names_are_pinned() -> None:
    from eve_cli import evals

    assert sorted(evals.__all__) == [
        "Answer", "Case", "CaseErrors", "CaseFileError", "CaseRun", "EvalOptions", "Expect",
        "Judge", "Stub", "ToolCallExpected", "ToolCallMade", "case", "load_cases", "run_case",
        "select",
    ]  # fmt: skip
    for name in evals.__all__:
        assert hasattr(evals, name), name


def test_execution_and_harness_names_are_pinned() -> None:
    """What other packages use of the execution layer and the harness (their modules behind
    these names are private: no other package imports them)."""
    from eve_cli import execution, harness

    assert sorted(execution.__all__) == [
        "ActionView", "Change", "ContextLostError", "Disposition", "ENDING_WAIT", "EventReader",
        "EventWatcher", "Executor", "ForkPointError", "Forked", "HistoryKeys", "KeyedStream",
        "Lineage", "McpView",
        "PAGE", "PendingView", "REF", "SESSION_WORKFLOW", "SessionRow", "SessionView", "StepView",
        "TAIL", "TAKEN_SCAN", "TURN_WORKFLOW", "TurnView", "ViewFold", "change_of", "decide",
        "first_message", "fold", "fork_session", "fresh_start", "lineage", "observe_events",
        "opens_session", "phase",
        "read_window", "receipt_boundary", "resolve", "settles", "started_event", "stored_event",
        "summary", "taken", "unpack", "window_messages",
    ]  # fmt: skip
    assert sorted(harness.__all__) == [
        "ArgumentError", "CallResult", "KeptReply", "OUTCOME", "Reply", "StepHost", "StepResult",
        "StoredReply", "StreamedText",
        "admit_resolved", "answer_problem", "apply_delivery", "cancel_pending", "compact",
        "compact_message", "expand_delivery", "fold_message", "run_step",
        "unresolved", "with_ids",
    ]  # fmt: skip
    for module in (execution, harness):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_runtime_names_are_pinned() -> None:
    from eve_cli import runtime

    assert sorted(runtime.__all__) == [
        "AgentLoadError", "DeliveryReceipt", "ForkPointError", "InvalidSessionIdError",
        "Runtime", "RuntimeErrorBase", "SessionNotFoundError", "default_data_dir", "open_world",
    ]  # fmt: skip


def test_auth_names_are_pinned() -> None:
    from eve_cli import auth

    assert sorted(auth.__all__) == [
        "ADMIN", "APPROVE", "AuthRequest", "AuthSettings", "LOCAL", "OPERATOR", "OidcLogin",
        "Principal", "READ", "Refused", "SCOPES", "SEND", "StaticTokens", "Verifiers",
        "define_auth", "digest", "load_auth",
    ]  # fmt: skip
    for name in auth.__all__:
        assert hasattr(auth, name), name
