"""The operations kit in deploy/: Prometheus alert rules (checked and unit-tested with promtool)
and the Grafana dashboard; every metric they use is exported by a real app's GET /metrics.

promtool is Debian's `prometheus` package: without it these tests skip, except on CI (`CI`
set), where they fail (`.ci/run` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from litestar.testing import TestClient

from tests.conftest import call, reserve, usage

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "ledger-alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "ledger-alerts.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "ledger-dashboard.json"
# Series Prometheus makes itself, not the ledger.
SYNTHETIC = {"up"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but promtool is not installed: .ci/run installs Debian's prometheus")
        pytest.skip("no promtool (Debian package prometheus) and CI is unset")
    return found


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in board["panels"] for target in panel["targets"]]


def metric_names(expr: str) -> set[str]:
    """The series names an expression reads (every ledger metric is named ledger_...)."""
    names = set(re.findall(r"\b(ledger_[a-z0-9_]+)", expr))
    names |= {name for name in SYNTHETIC if re.search(rf"\b{name}\{{", expr)}
    return names


def test_promtool_checks_the_rules_and_every_alert_fires_in_its_unit_tests(tmp_path: Path) -> None:
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = subprocess.run(
        [tool, "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=RULE_TESTS.parent
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout

    # Each alert has a unit test in which it fires (expected alerts, not only silence).
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in rules()}
    assert alerts - fired == set()
    required = {
        "LedgerIntegrityFailed",
        "LedgerHoldsOverdue",
        "LedgerReconcileErrors",
        "LedgerAlertDeliveryFailing",
        "LedgerNoSyncStandby",
        "LedgerTargetDown",
        "LedgerHigh5xxRate",
    }
    assert required <= alerts

    # The dashboard's queries parse (as recording rules, the only way promtool reads PromQL).
    as_rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    queries = tmp_path / "dashboard-queries.yml"
    queries.write_text(yaml.safe_dump(as_rules))
    parsed = subprocess.run([tool, "check", "rules", str(queries)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr


def test_the_dashboard_shows_what_operators_watch() -> None:
    board = json.loads(DASHBOARD.read_text())
    titles = " | ".join(panel["title"].lower() for panel in board["panels"])
    for topic in ("reserve", "latency", "402", "holds by state", "oldest", "revenue", "reconcil", "batch"):
        assert topic in titles, topic
    assert "standby" in titles and "integrity" in titles
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))


def exported_families(text: str) -> set[str]:
    """Every family the exposition declares, with the sample names a query may use."""
    names: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"# TYPE (\S+) (\S+)", line)
        if match:
            name, kind = match.groups()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
    return names


def test_every_metric_the_rules_and_dashboard_use_is_exported(
    client: TestClient[Any], world: dict[str, Any], settings: Any, sa_url: str
) -> None:
    from workers.actors import JobContext, check_integrity

    hold = reserve(client, world["account"])
    assert hold.status_code == 201, hold.text
    settled = call(client, hold.json()["id"], "settle", usage(100, 50))
    assert settled.status_code == 200, settled.text
    check_integrity(JobContext(settings, sa_url))  # ledger_integrity_ok exists once a check is recorded

    r = client.get("/metrics")
    assert r.status_code == 200
    exported = exported_families(r.text) | SYNTHETIC
    used = {name for rule in rules() for name in metric_names(rule["expr"])}
    used |= {name for expr in dashboard_exprs() for name in metric_names(expr)}
    assert len(used) > 15
    assert sorted(used - exported) == []
