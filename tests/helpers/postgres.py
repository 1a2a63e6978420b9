"""A throwaway PostgreSQL server for the tests and the benchmarks.

It owns finding the server binaries (Debian's ``postgresql`` package, which ``.ci/run``
installs, keeps them in ``/usr/lib/postgresql/<version>/bin``; ``ACP_AGENT_PG_BIN`` or the
``PATH`` may name others), ``initdb`` into a fresh temporary directory, starting ``postgres`` on
a free port of 127.0.0.1 and stopping it (and removing its files) at the end. Run as root, as
CI does, the server runs as the ``postgres`` user the package creates (``initdb`` refuses root).

It does not own what the tests do with the server, nor the store's schema.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

#: how a developer makes the PostgreSQL tests run (the skip reason says it)
ENABLE_HINT = (
    "install PostgreSQL's server binaries (Debian: apt-get install postgresql) and the extra "
    "(pip install -e '.[postgres]'), or set ACP_AGENT_TEST_POSTGRES=postgresql://..."
)


class NoPostgres(Exception):
    """No PostgreSQL server can be started here; the message says why."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (newest version wins)."""
    named = os.environ.get("ACP_AGENT_PG_BIN")
    candidates = [Path(named)] if named else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if all((directory / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One ``postgres`` process on 127.0.0.1 with a database cluster of its own.

    ``durable=False`` (the tests) turns ``fsync`` off: the cluster is thrown away anyway.
    The benchmarks keep the server's defaults.
    """

    def __init__(self, *, durable: bool = False, max_connections: int = 200) -> None:
        self.bin_dir = find_bin_dir()
        self.durable = durable
        self.max_connections = max_connections
        self.root = Path(tempfile.mkdtemp(prefix="acp-agent-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.url = ""
        self._user: str | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise NoPostgres("run as root, and no 'postgres' user to run the server") from None
            self._user = entry.pw_name
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            user=self._user,
            group=pwd.getpwnam(self._user).pw_gid if self._user else None,
            extra_groups=[] if self._user else None,
            cwd=self.root,
            timeout=120,
            check=False,
        )

    def start(self) -> str:
        """Create the cluster, start the server and return its URL (user ``acp``, trust)."""
        init = self._run(
            "initdb", "-D", str(self.data), "-U", "acp", "--auth=trust", "-E", "UTF8", "-N"
        )
        if init.returncode:
            raise NoPostgres(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
        settings = [
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.root}",
            f"-c max_connections={self.max_connections}",
        ]
        if not self.durable:
            settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        last = ""
        for _ in range(5):  # another process may take the free port first
            self.port = _free_port()
            started = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                " ".join([*settings, f"-p {self.port}"]),
            )
            if started.returncode == 0:
                self.url = f"postgresql://acp@127.0.0.1:{self.port}/postgres"
                return self.url
            last = self.log_tail() or started.stderr.strip()
        raise NoPostgres(f"postgres did not start: {last}")

    def log_tail(self, lines: int = 5) -> str:
        with contextlib.suppress(OSError):
            text = (self.root / "server.log").read_text(errors="replace")
            return " | ".join(text.strip().splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """Stop the server at once and remove the cluster. Idempotent."""
        if self.data.exists():
            self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running(*, durable: bool = False) -> Iterator[str]:
    """A started throwaway server's URL for the ``with`` block (``NoPostgres`` if none)."""
    server = PostgresServer(durable=durable)
    try:
        yield server.start()
    finally:
        server.stop()


def fresh_schema_url(url: str, **settings: str) -> str:
    """``url`` with its ``search_path`` set to a new, empty schema (one per test), and any
    other server ``settings`` for its sessions (``synchronous_commit="off"``)."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    pairs = {"search_path": name, **settings}
    options = urllib.parse.quote(" ".join(f"-c {key}={value}" for key, value in pairs.items()))
    return f"{url}{'&' if '?' in url else '?'}options={options}"
