"""The Docker files, without Docker (it cannot run here): the wheel the Dockerfile's build stage
makes is built from exactly the files its COPY lines name, and holds everything pgnl ships; the
compose file migrates and indexes the database before the proxy starts."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"


def build_stage_copies() -> list[tuple[str, str]]:
    """(source, destination) of each COPY of the Dockerfile's first stage (sources may be many)."""
    copies: list[tuple[str, str]] = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.split()[:1] not in (["FROM"], ["COPY"]):
            continue
        words = shlex.split(line, comments=True)
        if words and words[0].upper() == "FROM" and copies:
            break  # the next stage
        if words and words[0].upper() == "COPY" and not words[1].startswith("--"):
            *sources, destination = words[1:]
            copies += [(source, destination) for source in sources]
    return copies


def test_the_wheel_built_from_the_dockerfiles_copies_holds_what_pgnl_ships(
    tmp_path: Path,
) -> None:
    context = tmp_path / "src"
    context.mkdir()
    copies = build_stage_copies()
    assert copies, "no COPY in the Dockerfile's build stage"
    for source, destination in copies:
        into_folder = destination.endswith("/") or destination == "."
        target = context / destination / Path(source).name if into_folder else context / destination
        if (ROOT / source).is_dir():
            shutil.copytree(
                ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.so")
            )
        else:
            shutil.copy2(ROOT / source, target)
    out = tmp_path / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("--wheel-dir", str(out), str(context)),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = out.glob("pgnl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [
        *(f"proxy/migrations/{p.name}" for p in (ROOT / "migrations").glob("*.sql")),
        *(f"proxy/pg_functions/{p.name}" for p in (ROOT / "pg_functions").glob("*.py")),
        *(
            f"proxy/{p.relative_to(ROOT / 'proxy')}"
            for p in (ROOT / "proxy" / "models").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ),
        "proxy/demo/sample.sql",
        "proxy/cli.py",
    ]
    missing = [name for name in shipped if name not in names]
    assert not missing, f"the image's wheel lacks {missing[:5]}"
    if shutil.which("cc") or shutil.which("gcc"):  # the build stage installs gcc
        assert any(n.startswith("proxy/wire/_framing") and n.endswith(".so") for n in names)


def test_compose_migrates_and_indexes_before_the_proxy_starts() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    setup = services["setup"]
    script = " ".join(setup["entrypoint"])
    assert script.index("pgnl migrate") < script.index("pgnl index")
    assert "&&" in script  # no index when the migrations failed
    assert setup["depends_on"]["postgres"]["condition"] == "service_healthy"
    # the server keeps the statements it runs, for pgnl learn
    assert "shared_preload_libraries=pg_stat_statements" in services["postgres"]["command"]
    proxy = services["pgnl"]
    assert proxy["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    assert setup["build"] == proxy["build"]  # the same image
    dsn = setup["environment"]["PGNL_DSN"]
    assert "@postgres:5432/" in dsn and proxy["environment"]["PGNL_PROXY_UPSTREAM"].startswith(
        "postgresql://postgres:5432"
    )
