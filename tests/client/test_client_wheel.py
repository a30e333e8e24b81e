"""The client ships alone: its wheel, in a clean virtual environment, passes the client's tests.

Built here from clients/python (`pip wheel --no-deps`), installed with pytest and the two SDKs
whose usage objects the tests construct into a fresh venv that holds no service dependency
(checked: `litestar`, `sqlalchemy`, `dramatiq`, `pgserver`, `psycopg` and `ledger` all fail
to import there, and the wheel declares httpx as its only requirement, litellm only under its
`litellm` extra). Then the client's
tests (this folder but this file) run with that venv's interpreter against a real
`ledger serve` that `tests/client/server.py` starts with the project's interpreter
(`LEDGER_SERVER_PYTHON`); `LEDGER_CLIENT_ALONE=1` makes that run check that the client came
from the installed wheel and that nothing of the service was imported. Installing needs the
package index (or pip's configured find-links): without it the test skips, or fails when CI
is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).name
CLIENT = ROOT / "clients" / "python"
SERVICE = ("litestar", "sqlalchemy", "dramatiq", "pgserver", "psycopg", "ledger")
# What the client's tests import besides the client and the standard library.
TEST_REQUIREMENTS = ("pytest>=8", "openai>=3.63", "anthropic>=2.17")

PROBE = """
import importlib, json, sys
failed = {}
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError as error:
        failed[name] = type(error).__name__
import ledger_client
print(json.dumps({"failed": failed, "client": ledger_client.__file__}))
"""


def run(*args: str | Path, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{args} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def install(venv_python: Path, *requirements: str | Path, cwd: Path) -> None:
    """pip (the project's, pointed at the clean venv) installs `requirements` there."""
    pip = [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--quiet"]
    done = subprocess.run(
        [*pip, *map(str, requirements)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        reason = f"could not install {requirements} into a clean venv: {done.stderr[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def test_the_wheel_alone_in_a_clean_venv_passes_the_client_tests(tmp_path: Path) -> None:
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", CLIENT, "-w", tmp_path / "dist",
        cwd=tmp_path, timeout=120)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("ledger_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    requires = [line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist:")]
    # httpx is the one requirement; litellm comes only with the `litellm` extra (the proxy hook).
    required = [line.split()[1].split(">")[0] for line in requires if "extra ==" not in line]
    extras = [line.split()[1].split(">")[0] for line in requires if "extra ==" in line]
    assert required == ["httpx"], requires
    assert extras == ["litellm[proxy]"] and all('extra == "litellm"' in line for line in requires[1:]), (
        requires
    )
    assert top == {"ledger_client"} and "ledger_client/py.typed" in names, names

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, timeout=60)
    python = venv / "bin" / "python"
    install(python, wheel, *TEST_REQUIREMENTS, cwd=tmp_path)

    # Outside the repository (cwd tmp_path), so its source folders cannot stand in for packages.
    probe = json.loads(run(python, "-c", PROBE, ",".join(SERVICE), cwd=tmp_path, timeout=60))
    assert probe["failed"] == dict.fromkeys(SERVICE, "ModuleNotFoundError"), probe
    assert Path(probe["client"]).is_relative_to(venv), probe

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env.update(LEDGER_SERVER_PYTHON=sys.executable, LEDGER_CLIENT_ALONE="1")
    args = [
        "-m",
        "pytest",
        "-q",
        "--confcutdir",
        "tests/client",
        "tests/client",
        "--ignore",
        f"tests/client/{HERE}",
    ]
    out = run(python, *args, cwd=ROOT, env=env, timeout=240)
    summary = out.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) == len(client_tests()), out[-3000:]
    assert not re.search(r"failed|error|skipped|deselected", summary), out[-3000:]


def client_tests() -> list[str]:
    """The ids of the client's tests (this folder but this file), as the project's pytest collects them."""
    args = [
        "-m",
        "pytest",
        "-q",
        "-n",
        "0",
        "--collect-only",
        "tests/client",
        "--ignore",
        f"tests/client/{HERE}",
    ]
    out = run(sys.executable, *args, cwd=ROOT, timeout=120)
    ids = [line for line in out.splitlines() if line.startswith("tests/client/test_client_")]
    assert len(ids) >= 20, out[-3000:]
    return ids
