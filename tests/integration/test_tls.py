"""TLS with clients, terminated at the proxy with a configured certificate."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import trustme

from tests.fix_proxy import RunningProxy


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    issued = authority.issue_cert("localhost", "127.0.0.1")
    ca, cert, key = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    authority.cert_pem.write_to_path(str(ca))
    issued.private_key_pem.write_to_path(str(key))
    with cert.open("wb") as out:
        for blob in issued.cert_chain_pems:
            out.write(blob.bytes())
    return ca, cert, key


@pytest.fixture
def tls_proxy(
    make_proxy: Callable[..., RunningProxy], certificate: tuple[Path, Path, Path]
) -> RunningProxy:
    _, cert, key = certificate
    return make_proxy("--tls-cert", str(cert), "--tls-key", str(key))


def test_verified_tls_connection(
    tls_proxy: RunningProxy, certificate: tuple[Path, Path, Path]
) -> None:
    ca = certificate[0]
    dsn = tls_proxy.dsn(user="scram_user", sslmode="verify-full", sslrootcert=str(ca))
    with psycopg.connect(dsn.replace("127.0.0.1", "localhost"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT current_user").fetchone() == ("scram_user",)
        # the proxy terminates TLS: the upstream leg is a plain connection
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert row == (False,)


@pytest.mark.parametrize("user", ["md5_user", "clear_user", "trust_user"])
def test_every_auth_method_over_tls(tls_proxy: RunningProxy, user: str) -> None:
    with psycopg.connect(tls_proxy.dsn(user=user, sslmode="require"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_scram_over_tls_without_channel_binding(tls_proxy: RunningProxy) -> None:
    dsn = tls_proxy.dsn(user="scram_user", sslmode="require", channel_binding="prefer")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_no_certificate_means_plain_connections(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(sslmode="prefer"), autocommit=True) as conn:
        assert not conn.pgconn.ssl_in_use
    with pytest.raises(psycopg.OperationalError, match="does not support SSL"):
        psycopg.connect(proxy.dsn(sslmode="require"))


def test_data_pipelined_after_ssl_request_is_refused(tls_proxy: RunningProxy) -> None:
    """Bytes sent in clear behind an SSLRequest must not pass as encrypted (CVE-2021-23214)."""
    with socket.create_connection((tls_proxy.host, tls_proxy.port), timeout=5) as sock:
        sock.sendall(struct.pack("!ii", 8, 80877103) + b"Q\x00\x00\x00\x0dSELECT 1\x00")
        reply = sock.recv(1024)
    assert reply[:1] == b"E" and b"C08P01" in reply
