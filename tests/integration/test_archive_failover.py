"""WAL archiving follows the primary: after a switchover and a hard failover the promoted node
archives into the same pgBackRest stanza, and a backup taken on the old primary restores
with every commit, from before the backup, after it, and after the failover.

A pg_auto_failover formation (tests/formation.py: a monitor and two synchronously
replicating nodes) gets the deployed archiving on both nodes (`archive_mode = on` and
`deploy/pgbackrest/archive.conf`'s archive_command, each node with the deployed
pgbackrest.conf whose data directory is its own, one repository for both). archive_mode
takes effect at a start: the secondary's PostgreSQL is stopped (its keeper starts it
again), the primary's is restarted by a switchover. The settings go in with ALTER SYSTEM,
into the data directory's postgresql.auto.conf, which pg_rewind (and pg_basebackup) copy
from the node followed: once the old primary has rejoined after the switchover it carries
the new primary's archive_command, whose configuration names the other node's data
directory (archive-push refuses it), so each node's own is set again and checked then. In
production the command and configuration are the same on every node, so the copy is
harmless there. Then: stanza-create and a full backup
on the primary; a commit; the primary SIGKILLed (keeper and PostgreSQL); a commit on the
promoted node; `pgbackrest check` there (it archives); a restore of that backup into a
fresh data directory replays the WAL of both timelines and has all three commits.

Fails rather than skips under CI when pgBackRest or pg_auto_failover is missing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.backrest import archive_command, pgbackrest, render_config
from tests.formation import Formation, Node, available
from tests.pgcluster import Workspace, as_postgres, missing_prerequisites

MISSING = missing_prerequisites("pgbackrest") + ([] if available() else ["pg_autoctl"])

pytestmark = pytest.mark.skipif(
    bool(MISSING) and not os.environ.get("CI"), reason=f"missing: {', '.join(MISSING)} (and CI is unset)"
)


@pytest.fixture
def formation() -> Iterator[tuple[Formation, Workspace]]:
    assert not MISSING, f"CI is set but this machine lacks {', '.join(MISSING)}"
    workspace = Workspace("ldf")
    made = Formation(workspace.root)
    try:
        made.start()
        yield made, workspace
    finally:
        made.stop()
        workspace.close()


def _set_archiving(formation: Formation, node: Node, config: Path) -> None:
    """The deployed archive settings on `node`, its archive_command reading its own `config`."""
    formation.sql(node, "ALTER SYSTEM SET archive_mode = on")
    formation.sql(node, f"ALTER SYSTEM SET archive_command = '{archive_command(config)}'")
    formation.sql(node, "SELECT pg_reload_conf()")


def _wait_archiving(formation: Formation, node: Node, config: Path, timeout: float = 90) -> None:
    """Until `node` runs with archive_mode on and the archive_command that reads its own `config`."""
    want = [("on", archive_command(config))]
    deadline = time.monotonic() + timeout
    seen: list[tuple[object, ...]] = []
    while True:
        try:
            seen = formation.sql(
                node, "SELECT current_setting('archive_mode'), current_setting('archive_command')"
            )
            if seen == want:
                return
        except psycopg.Error:  # down while its keeper starts it again
            pass
        assert time.monotonic() < deadline, f"{node.name} archives with {seen}, not {want}"
        time.sleep(0.2)


def test_archiving_follows_the_primary_and_a_restore_spans_the_failover(
    formation: tuple[Formation, Workspace],
) -> None:
    pair, workspace = formation
    repo, logs, locks = workspace.folder("repo"), workspace.folder("log"), workspace.folder("lock")
    configs = {}
    for node in pair.nodes:
        socket = str(pair.sql(node, "SHOW unix_socket_directories")[0][0]).split(",")[0].strip()
        config = render_config(
            workspace.root / f"{node.name}.conf",
            repo=repo,
            logs=logs,
            locks=locks,
            pgdata=node.pgdata,
            port=node.port,
            socket=socket,
        )
        configs[node.name] = config
        _set_archiving(pair, node, config)

    first = pair.primary()
    second = pair.wait_secondary()
    as_postgres(["pg_ctl", "-D", str(second.pgdata), "-m", "fast", "-w", "stop"])
    _wait_archiving(pair, second, configs[second.name])
    pair.wait_secondary()
    pair.switchover()
    primary = pair.wait_primary(exclude=first)
    pair.wait_secondary()
    # The old primary rejoined (pg_rewind when it had diverged) with the new primary's
    # postgresql.auto.conf: give it its own archive_command again.
    for node in pair.nodes:
        _set_archiving(pair, node, configs[node.name])
        _wait_archiving(pair, node, configs[node.name])

    pgbackrest(configs[primary.name], "stanza-create")
    pgbackrest(configs[primary.name], "check")
    pair.sql(primary, "CREATE TABLE drill_marks (mark text PRIMARY KEY)")
    pair.sql(primary, "INSERT INTO drill_marks VALUES ('before the backup')")
    pgbackrest(configs[primary.name], "--type=full", "--start-fast", "backup")
    pair.sql(primary, "INSERT INTO drill_marks VALUES ('after the backup')")
    timeline_before = int(pair.sql(primary, "SELECT timeline_id FROM pg_control_checkpoint()")[0][0])

    killed = pair.kill_primary()
    survivor = pair.wait_primary(exclude=killed)
    pair.sql(survivor, "INSERT INTO drill_marks VALUES ('after the failover')")
    pgbackrest(configs[survivor.name], "check")  # the promoted node archives into the same stanza

    info = json.loads(pgbackrest(configs[survivor.name], "info", "--output=json"))
    newest_wal = info[0]["archive"][0]["max"]
    assert int(newest_wal[:8], 16) > timeline_before, f"nothing archived on the new timeline: {newest_wal}"
    assert [b["type"] for b in info[0]["backup"]] == ["full"]

    restored = workspace.cluster("restored")
    pgbackrest(configs[survivor.name], f"--pg1-path={restored.datadir}", "--archive-mode=off", "restore")
    restored.start()
    restored.wait_writable()
    marks = sorted(str(row[0]) for row in restored.sql("SELECT mark FROM drill_marks", "ledger"))
    assert marks == ["after the backup", "after the failover", "before the backup"]
