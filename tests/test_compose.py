"""compose.yaml is the production shape; no Docker here, so check it by reading it.

Every ledger service's command must parse with the real CLI parser, every
long-running service has a health check, there is exactly one scheduler, and
nothing starts before the migrations have completed. The api replicas sit behind
the `lb` service (no host port of their own) and need no Redis; only `migrate`
holds the schema owner's credentials, everything else runs as the service role.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ledger.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
LEDGER_SERVICES = ("migrate", "api", "worker", "scheduler")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = document["services"]
    return found


def test_the_production_shape_has_every_service(services: dict[str, Any]) -> None:
    assert set(services) >= {"postgres", "redis", "migrate", "lb", "api", "worker", "scheduler"}


@pytest.mark.parametrize("name", LEDGER_SERVICES)
def test_each_ledger_command_exists_in_the_cli(services: dict[str, Any], name: str) -> None:
    command = services[name]["command"]
    assert command[0] == "ledger"
    args = build_parser().parse_args(command[1:])  # argparse exits (SystemExit) on an unknown command
    assert args.command == command[1]
    assert callable(args.func)


def test_the_commands_are_the_expected_ones(services: dict[str, Any]) -> None:
    parser = build_parser()
    worker = parser.parse_args(services["worker"]["command"][1:])
    assert (worker.processes, worker.threads) == (1, 4)
    api = parser.parse_args(services["api"]["command"][1:])
    assert (api.host, api.port) == ("0.0.0.0", 8000)


@pytest.mark.parametrize("name", ["postgres", "redis", "api", "worker", "scheduler"])
def test_long_running_services_have_health_checks(services: dict[str, Any], name: str) -> None:
    check = services[name]["healthcheck"]
    assert check["test"] and check["interval"] and check["retries"] >= 1


@pytest.mark.parametrize("name", ["worker", "scheduler"])
def test_worker_and_scheduler_health_checks_use_ledger_health(services: dict[str, Any], name: str) -> None:
    test = services[name]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "ledger"]
    args = build_parser().parse_args(test[2:])
    assert args.command == "health" and getattr(args, name) is True


def test_exactly_one_scheduler(services: dict[str, Any]) -> None:
    assert services["scheduler"]["deploy"]["replicas"] == 1


@pytest.mark.parametrize("name", ["api", "worker", "scheduler"])
def test_services_wait_for_the_migrations(services: dict[str, Any], name: str) -> None:
    assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_long_running_service_gets_the_same_settings(services: dict[str, Any]) -> None:
    environments = [services[name]["environment"] for name in ("api", "worker", "scheduler")]
    assert all(env == environments[0] for env in environments)
    assert environments[0]["LEDGER_DATABASE_URL"].startswith("postgresql://")
    assert environments[0]["LEDGER_REDIS_URL"].startswith("redis://")
    migrate = services["migrate"]["environment"]
    assert {k: v for k, v in migrate.items() if k in environments[0]} == environments[0]


def _user(url: str) -> str | None:
    """The user of a URL whose password is a ${VAR:?message} interpolation (urlsplit trips on its `?`)."""
    found = re.match(r"postgresql://([^:@/]+)[:@]", url)
    return found.group(1) if found else None


def test_only_migrate_runs_as_the_schema_owner(services: dict[str, Any]) -> None:
    owner = services["postgres"]["environment"]["POSTGRES_USER"]
    migrate = services["migrate"]["environment"]
    assert _user(migrate["LEDGER_MIGRATION_DATABASE_URL"]) == owner
    role = migrate["LEDGER_SERVICE_ROLE"]
    assert role != owner
    for name in ("api", "worker", "scheduler", "migrate"):
        env = services[name]["environment"]
        assert _user(env["LEDGER_DATABASE_URL"]) == role, name
        if name != "migrate":
            assert "LEDGER_MIGRATION_DATABASE_URL" not in env, name
    # the role exists before migrate grants it: created by the postgres init script
    mounts = services["postgres"]["volumes"]
    init = next(m.split(":")[0] for m in mounts if "docker-entrypoint-initdb.d" in m)
    script = (ROOT / init).read_text()
    assert re.search(r'role="?' + re.escape(role), script) and "CREATE ROLE" in script
    assert "NOSUPERUSER" in script


def test_api_replicas_sit_behind_the_load_balancer(services: dict[str, Any]) -> None:
    api, lb = services["api"], services["lb"]
    assert "ports" not in api, "a fixed host port per replica collides as soon as there are two"
    assert api["expose"] == ["8000"]
    assert api["deploy"]["replicas"] >= 2
    assert lb["ports"] == ["8000:8000"]
    assert lb["depends_on"]["api"]["condition"] == "service_healthy"
    mount = next(v for v in lb["volumes"] if "haproxy.cfg" in v)
    config = (ROOT / mount.split(":")[0]).read_text()
    assert re.search(r"^\s*bind :8000$", config, re.M)
    assert re.search(r"^\s*server-template api \d+ api:8000 check resolvers docker", config, re.M)
    # liveness: a database failover must not take every replica out of the balancer
    assert "option httpchk GET /healthz" in config


def test_api_does_not_depend_on_redis(services: dict[str, Any]) -> None:
    depends = services["api"]["depends_on"]
    assert "redis" not in depends
    assert depends["postgres"]["condition"] == "service_healthy"
    assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_migrate_grants_the_service_role(services: dict[str, Any]) -> None:
    args = build_parser().parse_args(services["migrate"]["command"][1:])
    assert args.command == "migrate"
    assert services["migrate"]["environment"]["LEDGER_SERVICE_ROLE"]
