"""Real power cuts: eve runs on a loop-mounted ext4 image; at chosen moments the process is
frozen (SIGSTOP) and the image, the device's content then (not the page cache), is copied.
Each copy is mounted (ext4 replays its journal, as after a cut) and opened: every store opens,
every turn the process had acknowledged is there with the same texts, and a resume keeps every
event shown before it, runs no tool again whose result was shown, answers every delivery."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.eve_cli.power_support import Ack, check_store
from tests.eve_cli.rt_support import AgentFactory, call, reply, side_effect_tool

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

DRIVER = r"""
import asyncio, json, sys
from eve_cli.runtime import Runtime

sys.path.insert(0, sys.argv[3])
from tests.eve_cli.power_support import turns_of

def say(*words):
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()

async def main():
    rt = Runtime(data_dir=sys.argv[1], agent_dir=sys.argv[2])
    sid = await rt.create_session()
    say("SID", sid)
    for n in range(int(sys.argv[4])):
        text = f"message {n}"
        await rt.deliver(sid, text)
        say("DELIVERED", json.dumps(text))
        await rt.drive(sid)
        say("ACK", json.dumps(turns_of(rt.session(sid))))
    say("DONE")

asyncio.run(main())
"""

TURNS = 3
SCRIPT = [
    entry
    for n in range(TURNS)
    for entry in (
        reply(f"looking at {n}", call("record", text=f"r{n}"), delay=0.03),
        reply(f"the answer to message {n}, " * 4, delay=0.02),
    )
]
CUTS = 40  # at most this many copies of the device, at random moments of one run


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(args), capture_output=True, check=False)


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    image, mount = tmp_path / "device.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    mounted = made.returncode == 0 and _run("mount", "-o", "loop", str(image), str(mount))
    if not mounted or mounted.returncode != 0:
        why = (made.stderr or (mounted.stderr if mounted else b"")).decode().strip()
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot loop-mount an ext4 image in CI: {why}")
        pytest.skip(f"loop-mounting an ext4 image needs root and mkfs.ext4 (CI runs it): {why}")
    try:
        yield image, mount
    finally:
        _run("umount", str(mount))


def _turns(data: Any) -> list[Any]:
    return [(t[0], t[1], [(s[0], [tuple(a) for a in s[1]]) for s in t[2]]) for t in data]


def test_copies_of_a_device_frozen_mid_run_keep_what_was_acknowledged(
    ext4: tuple[Path, Path], tmp_path: Path, make_agent: AgentFactory
) -> None:
    image, mount = ext4
    log = tmp_path / "effects.log"
    agent = make_agent(script=SCRIPT, tools={"rec": side_effect_tool(log)})
    support = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([support, *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(mount / "data"), str(agent), support, str(TURNS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    rng = random.Random(22)
    cuts: list[tuple[Path, list[str]]] = []

    def cut() -> None:
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.02)  # what it wrote to stdout before it stopped is read now
        while not lines.empty():
            seen.append(lines.get())
        copy = tmp_path / f"cut{len(cuts)}.img"
        shutil.copyfile(image, copy)  # the device as it is now: frozen, nothing moves
        cuts.append((copy, list(seen)))
        proc.send_signal(signal.SIGCONT)

    try:
        seen.append(lines.get(timeout=60))  # started: its first line
        while len(cuts) < CUTS and "DONE" not in seen:
            # A cut at a random moment, or right after an acknowledgement.
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=rng.uniform(0.0, 0.12)))
            cut()
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        _, err = proc.communicate()
    assert "DONE" in seen or len(cuts) == CUTS, err
    assert any("ACK" in line for _, said in cuts for line in said), "no cut after a turn"
    opened = tmp_path / "opened"
    opened.mkdir()
    resumed = 0
    for n, (copy, said) in enumerate(cuts):
        sid = next((line.split()[1] for line in said if line.startswith("SID")), None)
        acks = [Ack(0, _turns(json.loads(line[4:]))) for line in said if line.startswith("ACK ")]
        acks += [
            Ack(0, [], json.loads(line[10:])) for line in said if line.startswith("DELIVERED ")
        ]
        done = _run("mount", "-o", "loop", str(copy), str(opened))
        assert done.returncode == 0, done.stderr.decode()
        try:
            if sid is None:  # cut before the session was acknowledged: the store must open
                from eve_cli.runtime import Runtime

                Runtime(data_dir=opened / "data", agent_dir=agent).close()
                continue
            where = f"cut {n} after {said[-3:]}"
            resumed += check_store(opened / "data", agent, sid, acks, log, where)
        finally:
            assert _run("umount", str(opened)).returncode == 0
            copy.unlink()
    assert resumed >= len(cuts) // 2
