"""Settings: defaults < TOML file < PGNL_* environment < command line, each documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy import config

ROOT = Path(__file__).resolve().parents[2]


def test_example_file_documents_every_setting_with_its_default() -> None:
    assert (ROOT / "pgnl.example.toml").read_text() == config.example_toml(), (
        "pgnl.example.toml is stale: regenerate it with `pgnl config > pgnl.example.toml`"
    )
    loaded = config.load(ROOT / "pgnl.example.toml", environ={})
    assert loaded == config.Settings()


def test_precedence(tmp_path: Path) -> None:
    path = tmp_path / "pgnl.toml"
    path.write_text('[proxy]\nlisten = "0.0.0.0:7000"\nmax_client_connections = 5\n')
    settings = config.load(
        path,
        environ={"PGNL_PROXY_MAX_CLIENT_CONNECTIONS": "7", "PGNL_EMBEDDED_PORT": "6000"},
        overrides={"proxy": {"listen": "127.0.0.1:7001"}},
    )
    assert settings.proxy.listen == "127.0.0.1:7001"
    assert settings.proxy.max_client_connections == 7
    assert settings.embedded.port == 6000
    assert settings.proxy.connect_timeout_s == 10.0


@pytest.mark.parametrize(
    ("toml", "environ", "complaint"),
    [
        ("[proxy]\nlisen = 'x'\n", {}, r"unknown setting \[proxy\] lisen"),
        ("[proxyy]\n", {}, r"unknown section \[proxyy\]"),
        ("[proxy]\nmax_client_connections = 'many'\n", {}, "must be an integer"),
        ("", {"PGNL_PROXY_CONNECT_TIMEOUT_S": "soon"}, "must be a number"),
        ("[proxy\n", {}, "not valid TOML"),
    ],
)
def test_bad_settings_say_what_is_wrong(
    tmp_path: Path, toml: str, environ: dict[str, str], complaint: str
) -> None:
    path = tmp_path / "pgnl.toml"
    path.write_text(toml)
    with pytest.raises(config.ConfigError, match=complaint):
        config.load(path, environ=environ)


def test_missing_file_is_an_error() -> None:
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load("/nonexistent/pgnl.toml", environ={})
