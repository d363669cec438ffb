"""Regenerate the browser view's screenshots in this folder: `python docs/screenshots/shoot.py`.

Starts `eve dev` on a free 127.0.0.1 port over a scratch data directory with a scripted agent,
makes a few sessions (a finished one with Markdown and a tool call, one parked on an approval),
and photographs the list, a session, the same session on a phone in dark mode, and the reload
bar after a broken edit. Needs Playwright and Debian's Chromium (`/usr/bin/chromium`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
REPLY = (
    "## Disk usage\n\nThe largest folders under **/var** are:\n\n"
    "| folder | size |\n|---|---|\n| log | 2.1 GB |\n| cache | 640 MB |\n\n"
    "To free space, run `journalctl --vacuum-size=200M`; see [the manual](https://www.freedesktop.org/software/systemd/man/journalctl.html)."
)
SCRIPT = [
    {"text": "", "tool_calls": [{"name": "disk_usage", "arguments": {"path": "/var"}}]},
    {"text": REPLY, "tool_calls": []},
    {"text": "", "tool_calls": [{"name": "clean", "arguments": {"path": "/var/log", "keep": "200M"}}]},
]
TOOLS = '''
from eve_cli import always, tool

@tool
def disk_usage(path: str) -> str:
    """Sizes of the folders under path."""
    return "log 2.1G\\ncache 640M"

@tool(approval=always())
def clean(path: str, keep: str) -> str:
    """Delete old files (asks first)."""
    return "freed 1.9G"
'''


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "agent" / "tools").mkdir(parents=True)
        (root / "s.json").write_text(json.dumps(SCRIPT))
        agent_py = root / "agent" / "agent.py"
        agent_py.write_text(
            "from eve_cli import define_agent\n\n"
            f"agent = define_agent(model='scripted:{root / 's.json'}', name='ops',"
            " instructions='You look after servers.')\n"
        )
        (root / "agent" / "tools" / "main.py").write_text(TOOLS)
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", "dev", "--port", "0", "--agent", str(root / "agent"),
             "--data", str(root / "data")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        try:
            assert proc.stdout is not None
            url = re.search(r"serving (http://\S+)", proc.stdout.readline()).group(1)  # type: ignore[union-attr]
            shoot(url, agent_py)
        finally:
            proc.terminate()
            proc.wait(10)


def shoot(url: str, agent_py: Path) -> None:
    api = url + "/eve/v1"
    done = httpx.post(api + "/session", json={"message": "Why is the disk full?"}).json()["sessionId"]
    time.sleep(1)
    httpx.post(f"{api}/session/{done}", json={"message": "Clean the logs, keep 200M."})
    httpx.post(api + "/session", json={"message": "hello"})
    time.sleep(1.5)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 720}, color_scheme="light")
        page.goto(url + "/")
        page.wait_for_selector("tr.row")
        page.screenshot(path=str(HERE / "sessions.png"))
        page.goto(f"{url}/#/s/{done}/1.1")
        page.wait_for_selector(".pending .ask")
        time.sleep(0.5)
        page.screenshot(path=str(HERE / "session.png"))
        phone = browser.new_page(viewport={"width": 390, "height": 844}, color_scheme="dark",
                                 is_mobile=True, has_touch=True)
        phone.goto(f"{url}/#/s/{done}")
        phone.wait_for_selector(".pending .ask")
        time.sleep(0.5)
        phone.screenshot(path=str(HERE / "phone-dark.png"))
        good = agent_py.read_text()
        agent_py.write_text(good.replace("name='ops',", "name='ops'"))
        page.goto(url + "/")
        page.wait_for_selector("#dev.bad", timeout=15000)
        page.screenshot(path=str(HERE / "dev-reload-error.png"))
        agent_py.write_text(good)
        browser.close()


if __name__ == "__main__":
    main()
