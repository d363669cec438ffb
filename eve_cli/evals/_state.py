"""An eval run's durable record, so a run killed midway is finished by the next `eve eval`
with the same cases and options, each case repetition counted once.

The eval directory (``.eve-evals/`` by default) holds ``run.json`` (the run under way: its id,
the key of its cases and options, whether it finished), ``results.jsonl`` (one line per
finished case repetition, written before it is reported; not synced: a line a power cut loses
is read again from its session, which is durable) and ``last.json``
(the last finished run's report). ``world/`` is the throwaway world of runs not given
``--world``: a new run (not a resumed one) starts it empty.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Required, TypedDict

from eve_cli.evals._case import Case
from eve_cli.evals._report import Report
from eve_cli.evals._runner import ResultEntry

DEFAULT_DIR = ".eve-evals"


class EvalBusy(RuntimeError):
    """Another `eve eval` runs in this eval directory (one line)."""


class Selection(TypedDict, total=False):
    """What `eve eval` was asked to run: case names and tags, the agent, the threshold."""

    names: list[str]
    tags: list[str]
    agent: str
    threshold: float


class RunOptions(Selection, total=False):
    """What makes two invocations the same run, besides the case files (`run_key`)."""

    repeat: int
    model: str | None
    judge: str | None
    world: str


class RunFile(TypedDict, total=False):
    """``run.json``: the run under way (``finished`` once its report is written)."""

    run: Required[str]
    key: str
    finished: bool
    started: float
    ended: float


@dataclass
class RunRecord:
    """The run under way: ``done`` maps (case, repetition) to its recorded result."""

    run_id: str
    key: str
    resumed: bool
    done: dict[tuple[str, int], ResultEntry] = field(default_factory=dict)


def run_key(cases: Iterable[Case], options: RunOptions) -> str:
    """What makes two invocations the same run: the case files' contents and the options."""
    digest = hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode())
    for c in sorted(cases, key=lambda c: c.name):
        digest.update(c.name.encode() + b"\0")
    for path in sorted({c.file for c in cases}):
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


class EvalDir:
    """The eval directory (see the module)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.run_file = folder / "run.json"
        self.results = folder / "results.jsonl"
        self.last = folder / "last.json"
        self.world = folder / "world"

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the directory for one `eve eval` (an OS lock: a killed holder frees it)."""
        import filelock

        self.folder.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(self.folder / "lock"), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise EvalBusy(
                f"another eve eval is running in {self.folder}; wait for it to end"
            ) from None
        try:
            yield
        finally:
            lock.release()

    def begin(self, key: str, *, throwaway_world: bool) -> RunRecord:
        """Resume the unfinished run of the same ``key``, or start a new one (emptying the
        throwaway world when ``throwaway_world``)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        current = self._read_run()
        if current and not current.get("finished") and current.get("key") == key:
            return RunRecord(str(current["run"]), key, True, self._done(str(current["run"])))
        if throwaway_world and self.world.exists():
            shutil.rmtree(self.world)
        self.results.unlink(missing_ok=True)
        record = RunRecord(f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}", key, False)
        self._write_json(
            self.run_file,
            {"run": record.run_id, "key": key, "finished": False, "started": time.time()},
        )
        return record

    def record(self, result: ResultEntry) -> None:
        """Add a finished case repetition before it is reported (one write: a kill leaves the
        line whole or cut, and a cut one is not read)."""
        line = json.dumps(result, default=str, ensure_ascii=False) + "\n"
        with self.results.open("a", encoding="utf-8") as handle:
            handle.write(line)

    def finish(self, record: RunRecord, report: Report) -> None:
        self._write_json(self.last, report)
        self._write_json(
            self.run_file,
            {"run": record.run_id, "key": record.key, "finished": True, "ended": time.time()},
        )

    def last_report(self) -> Report | None:
        try:
            found: Report = json.loads(self.last.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def _read_run(self) -> RunFile | None:
        try:
            found: RunFile = json.loads(self.run_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) and "run" in found else None

    def _done(self, run_id: str) -> dict[tuple[str, int], ResultEntry]:
        done: dict[tuple[str, int], ResultEntry] = {}
        try:
            lines = self.results.read_text(encoding="utf-8").splitlines()
        except OSError:
            return done
        for line in lines:
            try:
                item: ResultEntry = json.loads(line)
            except ValueError:  # a line cut short by a kill: that repetition runs again
                continue
            if isinstance(item, dict) and item.get("run") == run_id:
                done[(str(item["case"]), int(item["repeat"]))] = item
        return done

    @staticmethod
    def _write_json(path: Path, value: Any) -> None:
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(
            json.dumps(value, indent=1, default=str, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        with temp.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, path)
