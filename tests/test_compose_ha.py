"""compose.ha.yaml is the replicated production shape; no Docker here, so check it by reading it.

As for compose.yaml (tests/test_compose.py): every ledger command parses with the real CLI,
every long-running service has a health check, one scheduler, nothing before the
migrations. And for the formation: a pg_auto_failover monitor and two nodes built from
deploy/pgaf, each registered with that monitor and mounting the one pgBackRest repository
at the path pgbackrest.conf names, with archive.conf included; every ledger process
connects with a multi-host URL over exactly those nodes, read-write, which libpq parses.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from ledger.cli import build_parser
from ledger.database_url import DatabaseURL
from tests.test_compose import _user

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.ha.yaml"
LEDGER_SERVICES = ("migrate", "api", "worker", "scheduler")
NODES = ("node1", "node2")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = document["services"]
    return found


def _interpolated(value: str) -> str:
    """The value with each ${VAR:?message} replaced by `secret` (what compose would substitute)."""
    return re.sub(r"\$\{[^}]*\}", "secret", value)


def _dockerfile(service: dict[str, Any]) -> str:
    build = service["build"]
    return (ROOT / build["context"] / build["dockerfile"]).read_text()


def _installed_commands(dockerfile: str) -> dict[str, Path]:
    """`COPY pgaf/x.sh /usr/local/bin/name` lines: command name -> script (under the build context)."""
    found = re.findall(r"^COPY (\S+) /usr/local/bin/(\S+)$", dockerfile, re.M)
    return {name: ROOT / "deploy" / source for source, name in found}


def test_the_ha_shape_has_every_service(services: dict[str, Any]) -> None:
    assert set(services) >= {"monitor", *NODES, "redis", "migrate", "lb", "api", "worker", "scheduler"}
    assert "postgres" not in services, "the single database of compose.yaml has no place here"


@pytest.mark.parametrize("name", LEDGER_SERVICES)
def test_each_ledger_command_exists_in_the_cli(services: dict[str, Any], name: str) -> None:
    command = services[name]["command"]
    assert command[0] == "ledger"
    args = build_parser().parse_args(command[1:])
    assert args.command == command[1] and callable(args.func)


@pytest.mark.parametrize("name", ["monitor", *NODES, "redis", "api", "worker", "scheduler"])
def test_long_running_services_have_health_checks(services: dict[str, Any], name: str) -> None:
    check = services[name]["healthcheck"]
    assert check["test"] and check["interval"] and check["retries"] >= 1


def test_exactly_one_scheduler(services: dict[str, Any]) -> None:
    assert services["scheduler"]["deploy"]["replicas"] == 1


@pytest.mark.parametrize("name", ["api", "worker", "scheduler"])
def test_services_wait_for_the_migrations(services: dict[str, Any], name: str) -> None:
    assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for node in NODES:
        assert services["migrate"]["depends_on"][node]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", ["monitor", *NODES])
def test_database_services_run_scripts_the_image_installs(services: dict[str, Any], name: str) -> None:
    service = services[name]
    installed = _installed_commands(_dockerfile(service))
    command = service["command"][0]
    assert command in installed, f"{name} runs {command!r}, which the image does not install"
    script = installed[command]
    assert script.is_file() and script.stat().st_mode & 0o111, f"{script} is missing or not executable"
    text = script.read_text()
    assert "exec pg_autoctl run" in text
    # pg_autoctl refuses `--auth` with `--skip-pg-hba` ("Please use either --auth or --skip-pg-hba")
    assert not ("--auth" in text and "--skip-pg-hba" in text)


def test_nodes_register_with_the_monitor_and_the_second_is_cloned_from_the_first(
    services: dict[str, Any],
) -> None:
    monitor = services["monitor"]
    assert monitor["hostname"] == "monitor"
    for node in NODES:
        env = services[node]["environment"]
        target = urlsplit(env["PG_AUTOCTL_MONITOR"])
        assert (target.hostname, target.path) == ("monitor", "/pg_auto_failover")
        assert services[node]["hostname"] == node
        assert services[node]["depends_on"]["monitor"]["condition"] == "service_healthy"
    assert services["node2"]["depends_on"]["node1"]["condition"] == "service_healthy"
    node_script = _installed_commands(_dockerfile(services["node1"]))["pgaf-node"].read_text()
    assert "--replication-quorum true" in node_script  # the secondary is in the synchronous quorum


def test_both_nodes_archive_into_the_one_repository(services: dict[str, Any]) -> None:
    conf = configparser.ConfigParser(interpolation=None)
    conf.read(ROOT / "deploy" / "pgbackrest" / "pgbackrest.conf")
    repo = conf["global"]["repo1-path"]
    stanza = next(s for s in conf.sections() if not s.startswith("global"))
    archive = (ROOT / "deploy" / "pgbackrest" / "archive.conf").read_text()
    assert re.search(r"^archive_mode = (on|always)$", archive, re.M)
    assert f"archive_command = 'pgbackrest --stanza={stanza} archive-push %p'" in archive
    dockerfile = _dockerfile(services["node1"])
    assert "COPY pgbackrest/pgbackrest.conf /etc/pgbackrest/pgbackrest.conf" in dockerfile
    assert "COPY pgbackrest/archive.conf /etc/pgbackrest/archive.conf" in dockerfile
    node_script = _installed_commands(dockerfile)["pgaf-node"].read_text()
    assert 'archive_conf="${PGBACKREST_ARCHIVE_CONF:-/etc/pgbackrest/archive.conf}"' in node_script
    assert "include_if_exists = '$archive_conf'" in node_script  # run: tests/integration/test_pgaf_scripts.py
    volumes = set()
    for node in NODES:
        assert services[node]["environment"]["PGDATA"] == conf[stanza]["pg1-path"]
        mount = next(m for m in services[node]["volumes"] if m.endswith(":" + repo))
        volumes.add(mount.split(":")[0])
    assert len(volumes) == 1, "both nodes must mount the same repository volume"
    assert volumes <= set(yaml.safe_load(COMPOSE.read_text())["volumes"])


def test_every_ledger_process_connects_with_the_multi_host_url(services: dict[str, Any]) -> None:
    environments = [services[name]["environment"] for name in ("api", "worker", "scheduler")]
    assert all(env == environments[0] for env in environments)
    migrate = services["migrate"]["environment"]
    assert {k: v for k, v in migrate.items() if k in environments[0]} == environments[0]
    for url in (environments[0]["LEDGER_DATABASE_URL"], migrate["LEDGER_MIGRATION_DATABASE_URL"]):
        assert url.startswith("postgresql://")
        parsed = conninfo_to_dict(_interpolated(url))  # libpq's own parser: it must accept the form
        hosts = str(parsed["host"]).split(",")
        assert hosts == list(NODES)
        assert str(parsed["port"]).split(",") == ["5432", "5432"]
        assert parsed["dbname"] == "ledger"
        query = parse_qs(urlsplit(_interpolated(url)).query)
        assert query["target_session_attrs"] == ["read-write"]
        ledger_view = DatabaseURL.parse(_interpolated(url))  # and the ledger's own parser
        assert [(h.host, h.port) for h in ledger_view.hosts] == [(node, 5432) for node in NODES]
    assert environments[0]["LEDGER_REDIS_URL"].startswith("redis://")


def test_only_migrate_runs_as_the_schema_owner(services: dict[str, Any]) -> None:
    migrate = services["migrate"]["environment"]
    assert _user(migrate["LEDGER_MIGRATION_DATABASE_URL"]) == "ledger"
    assert migrate["LEDGER_SERVICE_ROLE"] == "ledger_service"
    for name in LEDGER_SERVICES:
        env = services[name]["environment"]
        assert _user(env["LEDGER_DATABASE_URL"]) == "ledger_service", name
        if name != "migrate":
            assert "LEDGER_MIGRATION_DATABASE_URL" not in env, name
    node_script = _installed_commands(_dockerfile(services["node1"]))["pgaf-node"].read_text()
    for role in ("ledger", "ledger_service"):
        assert re.search(rf"CREATE ROLE {role} LOGIN PASSWORD :'\w+' NOSUPERUSER", node_script), role


def test_api_replicas_sit_behind_the_load_balancer_and_need_no_redis(services: dict[str, Any]) -> None:
    api, lb = services["api"], services["lb"]
    assert "ports" not in api and api["expose"] == ["8000"]
    assert api["deploy"]["replicas"] >= 2
    assert lb["ports"] == ["8000:8000"]
    assert lb["depends_on"]["api"]["condition"] == "service_healthy"
    assert "redis" not in api["depends_on"]
    assert any("haproxy.cfg" in v for v in lb["volumes"])
