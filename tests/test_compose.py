"""compose.yaml is the production shape; no Docker here, so check it by reading it.

Every ledger service's command must parse with the real CLI parser, every
long-running service has a health check, there is exactly one scheduler, and
nothing starts before the migrations have completed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ledger.cli import build_parser

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"
LEDGER_SERVICES = ("migrate", "api", "worker", "scheduler")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = document["services"]
    return found


def test_the_production_shape_has_every_service(services: dict[str, Any]) -> None:
    assert set(services) >= {"postgres", "redis", "migrate", "api", "worker", "scheduler"}


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


def test_every_ledger_service_gets_the_same_settings(services: dict[str, Any]) -> None:
    environments = [services[name]["environment"] for name in LEDGER_SERVICES]
    assert all(env == environments[0] for env in environments)
    assert environments[0]["LEDGER_DATABASE_URL"].startswith("postgresql://")
    assert environments[0]["LEDGER_REDIS_URL"].startswith("redis://")
