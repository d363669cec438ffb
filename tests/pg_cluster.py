"""A throwaway PostgreSQL cluster a test makes itself: `initdb` into a temporary folder, its own
port on 127.0.0.1, started and crashed (`pg_ctl stop -m immediate`: the server killed, its
WAL buffers lost, as in a crash) as often as the test likes, removed afterwards.

The server refuses to run as root: under root (CI) every command runs as the `postgres` user
(`runuser`), over a folder it owns. The binaries are PostgreSQL's own (`/usr/lib/postgresql/
<version>/bin`, else `pg_config --bindir`). Outside CI a machine without them skips the test;
under CI (`CI=true`) it fails it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Seconds the WAL writer waits between flushes: long, so that a commit made without waiting
# for its WAL (`synchronous_commit = off`) is reliably lost by a crash within a test.
WAL_WRITER_DELAY = "10s"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """One throwaway cluster (made stopped: `start` it)."""

    def __init__(self, bindir: Path, folder: Path) -> None:
        self.bindir, self.folder = bindir, folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            pwd.getpwnam("postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(folder, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                "unix_socket_directories = ''\nmax_connections = 60\n"
                f"shared_buffers = 16MB\nwal_writer_delay = {WAL_WRITER_DELAY}\n"
                "fsync = on\nsynchronous_commit = on\n"
            )

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run(
            [*self.as_user, str(self.bindir / tool), *args],
            capture_output=True, text=True, timeout=120, cwd=self.folder,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {proc.stderr or proc.stdout}")

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log))

    def crash(self) -> None:
        """Stop the server as a crash would (no checkpoint, WAL buffers lost)."""
        self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "stop", "-m", "fast", "-w", "-D", str(self.data))


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """A started cluster of its own, stopped and removed afterwards."""
    bindir = _bindir()
    if bindir is None:
        message = "no PostgreSQL server binaries (initdb) on this machine"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; under CI the crash tests must run")
        pytest.skip(f"{message}; not under CI, so skipped")
    folder = Path(tempfile.mkdtemp(prefix="eve-pg-cluster-"))
    cluster: Cluster | None = None
    try:
        cluster = Cluster(bindir, folder)
        cluster.start()
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
