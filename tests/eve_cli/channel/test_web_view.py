"""The browser view at `/` (SPEC §14) in a real headless Chromium against a real `eve start`:
the live session list, a streamed reply, safe Markdown, acting (approve, deny, answer, send,
cancel, compact, clear), the step tree, a server killed and restarted under an open page, the
token, a phone-sized dark page, and `eve dev`'s reload results."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.browser_support import PHONE, Tab, expect
from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    of_type,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"
JSON = {"content-type": "application/json"}

TOOLS = """
from eve_cli import always, tool

@tool(approval=always())
def gate(reason: str) -> str:
    \"\"\"Needs the user's approval.\"\"\"
    return "passed " + reason
"""

Start = Callable[..., EveProcess]


def agent_with(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    return write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", entries), TOOLS)


def create(server: EveProcess, message: str | None = None, **headers: str) -> str:
    body = {"message": message} if message is not None else {}
    response = httpx.post(
        f"{server.url}{API}/session", json=body, headers=headers or None, timeout=WAIT
    )
    assert response.status_code == 202, response.text
    return str(response.json()["sessionId"])


def test_a_new_session_appears_in_the_list_without_a_reload_and_parked_ones_filter(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path, world_spec: str
) -> None:
    agent = agent_with(tmp_path, [reply("hello"), call("gate", reason="r")])
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--world", world_spec)
    t = tab()
    navigations: list[str] = []
    t.page.on("framenavigated", lambda frame: navigations.append(frame.url))
    t.page.goto(server.url + "/")
    expect(t.page.locator("#sessions")).to_contain_text("No sessions yet")

    waiting = create(server, "hi")
    read_events(server.url, waiting, settled())
    row = t.page.locator(f'tr[data-id="{waiting}"]')
    expect(row).to_contain_text("waiting")
    row.locator("a.sid").focus()  # the keyboard is on a row while the list changes
    parked = create(server, "hi")  # a session's N-th model call answers entry N of the script
    read_events(server.url, parked, settled())
    httpx.post(f"{server.url}{API}/session/{parked}", json={"message": "gate"}, timeout=WAIT)
    read_events(server.url, parked, of_type("turn.waiting"))
    expect(t.page.locator(f'tr[data-id="{parked}"]')).to_contain_text("parked: approval")
    assert navigations == [server.url + "/"], "the list changed by reloading the page"
    focused = t.page.evaluate("document.activeElement.getAttribute('href')")
    assert focused == f"#/s/{waiting}", "a live update took the keyboard focus away"

    # Each row shows its first message and its age; the search box filters by text or id.
    expect(row).to_contain_text("hi")
    expect(row).to_contain_text(re.compile(r"just now| ago"))
    t.page.locator("#search").fill(parked[-10:])
    expect(t.page.locator("tr.row")).to_have_count(1)
    t.page.locator("#search").fill("no such words")
    expect(t.page.locator("#sessions")).to_contain_text("No session matches")
    t.page.locator("#search").fill("")

    t.page.get_by_role("link", name=re.compile(r"^parked")).click()
    expect(t.page.locator("tr.row")).to_have_count(1)
    expect(t.page.locator(f'tr[data-id="{parked}"]')).to_be_visible()
    # Offline: every request the page made went to the server itself.
    assert t.requests and all(u.startswith(server.url + "/") for u in t.requests), t.requests


def test_a_streamed_reply_renders_progressively_as_safe_markdown(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    hostile = (
        "**Bold** and `code`\n\n"
        '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>\n\n'
        "[click](javascript:window.pwned=3) and [docs](https://example.org/x)\n\n"
        "- one\n- two"
    )
    agent = agent_with(
        tmp_path, [{"text": hostile, "tool_calls": [], "delay": 3.0}, reply("the queued one")]
    )
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = create(server)
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    expect(t.page.locator("#conn")).to_have_text("live")
    httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "go"}, timeout=WAIT)

    bubble = t.page.locator(".msg.assistant")
    # The first delta is shown while the model is still answering (it sleeps after it).
    expect(bubble).to_have_class(re.compile(r"\bstreaming\b"))
    expect(bubble).to_have_text("*")
    # While it runs, a message queued from the page waits for the next turn.
    t.page.locator("#policy").select_option("queue")
    t.page.locator("#message").fill("after that")
    t.page.locator("#message").press("Enter")
    expect(t.page.locator("#toast")).to_have_text("queued for the next turn")
    expect(bubble.first).not_to_have_class(re.compile(r"\bstreaming\b"))
    expect(bubble.last).to_have_text("the queued one")
    bubble = bubble.first
    expect(bubble.locator("strong")).to_have_text("Bold")
    expect(bubble.locator("li")).to_have_count(2)
    assert bubble.locator("img, script, iframe").count() == 0
    assert "<script>window.pwned=2</script>" in bubble.inner_text()
    hrefs = bubble.locator("a").evaluate_all("links => links.map(a => a.href)")
    assert hrefs == ["https://example.org/x"]
    assert t.page.evaluate("window.pwned") is None


def test_reasoning_is_shown_dimmed_and_folded_until_opened(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    thought = "First I weigh <b>both</b> options, then I answer."
    agent = agent_with(tmp_path, [{**reply("the answer"), "reasoning": thought}])
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = create(server, "think")
    read_events(server.url, sid, settled())
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    folded = t.page.locator("details.msg.reasoning")
    expect(folded).to_have_count(1)
    assert folded.get_attribute("open") is None  # folded: the answer is what shows
    expect(folded.locator(".plain")).not_to_be_visible()
    expect(t.page.locator(".msg.assistant")).to_have_text("the answer")
    folded.locator("summary").click()
    expect(folded.locator(".plain")).to_have_text(thought)  # as text, never as markup
    assert folded.locator("b").count() == 0
    muted = folded.evaluate("d => getComputedStyle(d).color")
    body = t.page.evaluate("getComputedStyle(document.body).color")
    assert muted != body  # dimmed against the page's text


def test_an_approval_clicked_in_the_page_resumes_the_parked_turn(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path, world_spec: str
) -> None:
    agent = agent_with(
        tmp_path,
        [
            call("gate", reason="r1"),
            reply("after approve"),
            call("gate", reason="r2"),
            reply("after deny"),
            call("gate", reason="r3"),
            reply("after always"),
            call("gate", reason="r4"),
            reply("not asked again"),
        ],
    )
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--world", world_spec)
    sid = create(server)
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    box = t.page.locator("#message")
    box.fill("open it")
    box.press("Enter")  # the keyboard sends
    card = t.page.locator(".pending .ask")
    expect(card).to_contain_text('gate(reason="r1")')
    expect(t.page.locator(".session-head")).to_contain_text("parked: approval")
    card.get_by_role("button", name="Approve").click()
    expect(t.page.locator(".msg.assistant")).to_have_text("after approve")
    expect(t.page.locator(".session-head")).to_contain_text("waiting")
    expect(card).to_have_count(0)

    box.fill("again")
    t.page.get_by_role("button", name="Send").click()
    t.page.get_by_role("button", name="Deny").click()
    expect(t.page.locator(".msg.assistant").last).to_have_text("after deny")
    expect(t.page.locator('.msg.tool[data-call="call_2_0"] .badge')).to_have_text("rejected")
    box.fill("third")
    box.press("Enter")
    t.page.get_by_role("button", name="Always").click()
    expect(t.page.locator(".msg.assistant").last).to_have_text("after always")
    box.fill("fourth")
    box.press("Enter")  # the tool was approved for the session: no question this time
    expect(t.page.locator(".msg.assistant").last).to_have_text("not asked again")
    expect(t.page.locator('.msg.tool[data-call="call_6_0"] .badge')).to_have_text("completed")

    # The step tree, and one checkpoint with what changed since the previous one.
    t.page.locator('a.step[data-ref="1.1"]').click()
    changes = t.page.locator("#step-detail .changes")
    expect(changes).to_contain_text("+ approved")
    expect(changes).to_contain_text("+ result gate [completed]: passed r1")
    expect(t.page.locator("#step-detail")).to_contain_text("changes since step 1.0")
    assert t.page.url.endswith(f"#/s/{sid}/1.1")
    events = read_events(server.url, sid, of_type("turn.completed"), start=0)
    resolved = [e for e in events if e["type"] == "input.resolved"]
    assert [e["approved"] for e in resolved] == [True]  # the second turn's came later
    events = read_events(server.url, sid, lambda e: e.get("text") == "not asked again")
    assert [e["approved"] for e in events if e["type"] == "input.resolved"] == [True, False, True]
    assert sum(e["type"] == "input.requested" for e in events) == 3


def test_a_question_cancel_compact_and_clear_from_the_page(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    question = {"question": "Which color?", "options": ["red", "blue"]}
    agent = agent_with(
        tmp_path,
        [
            call("ask_question", **question),
            reply("you chose"),
            {"text": "a very slow answer", "tool_calls": [], "delay": 60},
        ],
    )
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = create(server, "ask me")
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    ask = t.page.locator(".pending .ask")
    expect(ask).to_contain_text("Which color?")
    ask.get_by_role("button", name="blue").click()
    expect(t.page.locator(".msg.assistant")).to_have_text("you chose")
    expect(t.page.locator(".msg.note")).to_have_text("answered: blue")

    t.page.locator("#message").fill("be slow")
    t.page.locator("#message").press("Enter")
    expect(t.page.locator(".msg.assistant.streaming")).to_have_count(1)
    t.page.get_by_role("button", name="Cancel turn").click()
    expect(t.page.locator(".msg.divider")).to_have_text("turn cancelled")

    t.page.get_by_role("button", name="Compact").click()
    expect(t.page.locator(".msg.divider").last).to_contain_text("context compacted")
    t.page.once("dialog", lambda dialog: dialog.accept())
    t.page.get_by_role("button", name="Clear").click()
    expect(t.page.locator(".msg.divider").last).to_have_text("context cleared")
    types = [e["type"] for e in read_events(server.url, sid, of_type("context.cleared"))]
    assert "turn.cancelled" in types and "compaction.completed" in types


def test_a_sub_agent_task_links_to_its_session(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    agent = agent_with(tmp_path, [call("helper", task="count the files"), reply("parent done")])
    child = write_script(tmp_path / "child.json", [reply("child done")])
    write_agent(tmp_path / "agent" / "subagents" / "helper", child)
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = create(server, "delegate")
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    expect(t.page.locator(".msg.assistant").last).to_have_text("parent done")
    task = t.page.locator(".msg.task a.sid").first
    expect(task).to_be_visible()
    child_id = task.inner_text()
    assert child_id != sid
    task.click()
    expect(t.page.locator(".session-head .sid")).to_have_text(child_id)
    expect(t.page.locator(".msg.user")).to_have_text(re.compile("count the files"))
    expect(t.page.locator(".msg.assistant")).to_have_text("child done")
    # Readable, not writable: its parent's turn drives it.
    refused = httpx.post(f"{server.url}{API}/session/{child_id}", json={"message": "x"})
    assert refused.status_code == 400 and sid in refused.json()["error"]["message"]


def test_the_page_survives_a_server_killed_and_restarted(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path, world_spec: str
) -> None:
    agent = agent_with(tmp_path, [reply("first answer"), reply("second answer")])
    args = ("--agent", str(agent), "--world", world_spec)
    server = eve_process("start", "--port", "0", *args)
    port = server.url.rsplit(":", 1)[1]
    sid = create(server, "one")
    t = tab()
    t.page.goto(f"{server.url}/#/s/{sid}")
    expect(t.page.locator(".msg.assistant")).to_have_text("first answer")
    expect(t.page.locator("#conn")).to_have_text("live")

    server.signal(signal.SIGKILL)
    server.wait()
    expect(t.page.locator("#conn")).to_have_text("reconnecting…")
    again = eve_process("start", "--port", port, *args)
    assert again.url == server.url
    expect(t.page.locator("#conn")).to_have_text("live")
    httpx.post(f"{again.url}{API}/session/{sid}", json={"message": "two"}, timeout=WAIT)
    expect(t.page.locator(".msg.assistant").last).to_have_text("second answer")
    # Continued from the last event it had: nothing shown twice.
    expect(t.page.locator(".msg.user")).to_have_count(2)
    expect(t.page.locator(".msg.assistant")).to_have_count(2)
    stream = [u for u in t.requests if "/stream?" in u]
    assert len(stream) >= 2 and not stream[-1].endswith("startIndex=0"), stream


def test_a_wrong_token_is_refused_and_the_right_one_kept_for_the_tab_only(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    agent = agent_with(tmp_path, [reply("hello")])
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--token", "s3cret-T")
    sid = create(server, "hi", authorization="Bearer s3cret-T")
    t = tab()
    t.page.goto(server.url + "/")
    form = t.page.locator("form.token")
    expect(form).to_be_visible()
    t.page.locator("#token").fill("wrong")
    t.page.locator("#token").press("Enter")
    expect(t.page.locator("#token-why")).to_have_text("bad bearer token")
    assert t.page.locator("#sessions").count() == 0

    t.page.locator("#token").fill("s3cret-T")
    t.page.get_by_role("button", name="Open").click()
    expect(t.page.locator(f'tr[data-id="{sid}"]')).to_contain_text("waiting")
    t.page.reload()  # the same tab keeps it…
    expect(t.page.locator(f'tr[data-id="{sid}"]')).to_be_visible()
    stored = t.page.evaluate("JSON.stringify([sessionStorage, localStorage])")
    assert "s3cret-T" in json.loads(stored)[0].values()
    assert "s3cret-T" not in json.dumps(json.loads(stored)[1])
    other = tab()  # …another tab asks again
    other.page.goto(f"{server.url}/#/s/{sid}")
    expect(other.page.locator("form.token")).to_be_visible()


def test_a_phone_sized_dark_page_fits_and_switches_panes(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    agent = agent_with(tmp_path, [reply("a reply " * 40)])
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = create(server, "a long message " * 20)
    t = tab(viewport=PHONE, color_scheme="dark", has_touch=True, is_mobile=True)
    t.page.goto(server.url + "/")
    expect(t.page.locator(f'tr[data-id="{sid}"]')).to_be_visible()
    fits = "document.documentElement.scrollWidth <= window.innerWidth"
    assert t.page.evaluate(fits)
    background = t.page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert sum(int(c) for c in re.findall(r"\d+", background)[:3]) < 150, background

    t.page.locator(f'tr[data-id="{sid}"] a.sid').click()
    expect(t.page.locator(".msg.assistant")).to_contain_text("a reply")
    assert t.page.evaluate(fits)
    expect(t.page.locator("#tree")).to_be_hidden()
    t.page.get_by_role("tab", name="Steps").click()
    expect(t.page.locator("#tree")).to_contain_text("step 1.0")
    expect(t.page.locator("#conv")).to_be_hidden()
    t.page.keyboard.press("Escape")  # back to the list
    expect(t.page.locator("#sessions")).to_be_visible()
    t.page.keyboard.press("/")  # to the first-message box
    expect(t.page.locator("#first")).to_be_focused()
    t.page.keyboard.press("Escape")  # out of it again
    t.page.keyboard.press("t")  # theme: auto → light
    expect(t.page.locator("html")).to_have_attribute("data-theme", "light")


def test_eve_dev_shows_each_reload_result_with_file_and_line(
    eve_process: Start, tab: Callable[..., Tab], tmp_path: Path
) -> None:
    agent = agent_with(tmp_path, [reply("hello")])
    server = eve_process("dev", "--port", "0", "--agent", str(agent))
    server.stderr_until("watching")
    t = tab()
    t.page.goto(server.url + "/")
    bar = t.page.locator("#dev")
    expect(bar).to_contain_text("watching")
    good = (agent / "agent.py").read_text()
    (agent / "agent.py").write_text(good + "\ndef broken(:\n")
    expect(bar).to_contain_text("reload failed")
    expect(bar.locator(".reload-error")).to_contain_text(re.compile(r"agent\.py:5\b"))
    expect(bar).to_have_class(re.compile(r"\bbad\b"))
    (agent / "agent.py").write_text(good)
    expect(bar).to_contain_text("reloaded agent t")
    expect(bar).not_to_have_class(re.compile(r"\bbad\b"))


def test_the_page_files_need_no_token_and_forbid_foreign_code(
    eve_process: Start, tmp_path: Path
) -> None:
    agent = agent_with(tmp_path, [reply("x")])
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--token", "tok")
    for path in ("/", "/view/eve.js", "/view/eve.css"):
        response = httpx.get(server.url + path, timeout=WAIT)
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert not re.findall(r"(?:src|href)=\"(?:https?:)?//", response.text), path
    assert httpx.get(f"{server.url}{API}/sessions", timeout=WAIT).status_code == 401
    assert httpx.get(f"{server.url}/view/other.js", timeout=WAIT).status_code == 401
