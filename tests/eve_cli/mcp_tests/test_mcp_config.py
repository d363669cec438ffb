"""`mcp.json` and `define_agent(mcp_servers=)` as the loader reads them (no server started):
errors name file and line, names cannot collide, `${VAR}` stays unexpanded until a start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eve_cli._loader import AgentLoadError, load_agent
from eve_cli.mcp._config import MissingVariableError, expand
from eve_cli.mcp._names import MAX_NAME, exposed_name, server_of
from tests.eve_cli.rt_support import AgentFactory, tool_file


def with_mcp(make_agent: AgentFactory, text: str, **kwargs: object) -> Path:
    folder = make_agent(**kwargs)
    (folder / "mcp.json").write_text(text)
    return folder


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"mcpServers": {\n  "a": {"command": "x",}\n}}', "mcp.json:2: not valid JSON"),
        ('{"servers": {}}', 'mcp.json:1: expected {"mcpServers"'),
        (
            '{"mcpServers": {\n\n "a": {"command": "x", "colour": 1}}}',
            "mcp.json:3: MCP server 'a': unknown field(s) colour",
        ),
        ('{"mcpServers": {"a__b": {"command": "x"}}}', "MCP server name 'a__b'"),
        ('{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}', "give either command"),
        (
            '{"mcpServers": {"a": {"command": "x", "approval": "sometimes"}}}',
            "approval 'sometimes'",
        ),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}', "env must map names"),
        ('{"mcpServers": {"a": {"command": "x", "timeout": {"t": 0}}}}', "timeout must be"),
    ],
)
def test_a_bad_declaration_is_one_line_with_file_and_line(
    make_agent: AgentFactory, text: str, message: str
) -> None:
    folder = with_mcp(make_agent, text)
    with pytest.raises(AgentLoadError) as caught:
        load_agent(folder)
    assert message in str(caught.value) and str(folder) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_declarations_from_both_places(make_agent: AgentFactory) -> None:
    agent_args = (
        "mcp_servers={'code': {'url': 'http://127.0.0.1:1/mcp', "
        "'approval': {'run': (lambda args: 'denied'), '*': once()}}}"
    )
    folder = make_agent(agent_args=agent_args)
    (folder / "agent.py").write_text(
        f"from eve_cli import define_agent, once\n\nagent = define_agent({agent_args})\n"
    )
    (folder / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "srv", "args": ["${HOME}"]},
                    "off": {"command": "x", "disabled": True},
                }
            }
        )
    )
    agent = load_agent(folder)
    files, code = agent.mcp
    assert (files.name, files.kind, files.args) == ("files", "stdio", ("${HOME}",))
    assert (code.name, code.kind, code.approval.kind) == ("code", "http", "once")
    assert code.policy("run").decide({}, approved_before=False) == "denied"
    assert code.source.endswith("agent.py:3")

    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        "agent = define_agent(mcp_servers={'files': {'command': 'other'}})\n"
    )
    with pytest.raises(AgentLoadError, match=r"'files' is declared in .*mcp\.json too"):
        load_agent(folder)


def test_a_local_tool_cannot_take_an_mcp_name(make_agent: AgentFactory) -> None:
    body = tool_file(
        """
        @tool(name="mcp__x__y")
        def sneaky() -> str:
            \"\"\"No.\"\"\"
            return ""
        """
    )
    with pytest.raises(AgentLoadError, match="names starting 'mcp__'"):
        load_agent(make_agent(tools={"t": body}))


def test_names_for_the_model() -> None:
    assert exposed_name("files", "read_file") == "mcp__files__read_file"
    assert server_of("mcp__files__read__file") == "files"
    assert server_of("read_file") is None and server_of("mcp__files") is None
    odd = exposed_name("files", "read.file")
    assert odd.startswith("mcp__files__read_file_") and odd != exposed_name("files", "read_file")
    long_a, long_b = exposed_name("s", "x" * 80 + "a"), exposed_name("s", "x" * 80 + "b")
    assert len(long_a) == MAX_NAME and long_a != long_b


def test_references_expand_only_at_a_start(make_agent: AgentFactory, tmp_path: Path) -> None:
    folder = with_mcp(
        make_agent,
        json.dumps({"mcpServers": {"s": {
            "command": "${BIN:-srv}", "cwd": "sub", "headers": {},
            "env": {"TOKEN": "Bearer ${TOKEN}"}, "args": ["${MISSING}"], "timeout": {"slow": 2.5},
        }}}),
    )  # fmt: skip
    [spec] = load_agent(folder).mcp
    assert dict(spec.env) == {"TOKEN": "Bearer ${TOKEN}"}  # what the definition holds
    assert (spec.timeout_for("any"), spec.timeout_for("slow")) == (60.0, 2.5)
    with pytest.raises(MissingVariableError, match=r"\$\{MISSING\} is not set"):
        expand(spec, {"TOKEN": "t0ps3cret"})
    launch = expand(spec, {"TOKEN": "t0ps3cret", "MISSING": "m"})
    assert (launch.command, launch.args, launch.env) == (
        "srv",
        ("m",),
        {"TOKEN": "Bearer t0ps3cret"},
    )
    assert launch.cwd == folder / "sub"
    assert launch.redact("token t0ps3cret here") == "token *** here"
