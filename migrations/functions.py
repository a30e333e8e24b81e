"""SQL functions as an earlier migration defined them, for a later migration's downgrade.

A migration that replaces a database function must restore the previous definition on
downgrade. Rather than a copy of that definition, the downgrade reads it from the
migration that wrote it: `defined_by("0013_credit_grants.py", "ledger_entry_post")` is
the `CREATE [OR REPLACE] FUNCTION ledger_entry_post(...) ... END $$;` statement of that
file's UPGRADE, as CREATE OR REPLACE. A missing definition fails the downgrade loudly.
"""

from __future__ import annotations

import re
from pathlib import Path

VERSIONS = Path(__file__).parent / "versions"


def defined_by(migration: str, *names: str) -> str:
    text = (VERSIONS / migration).read_text()
    upgrade = text.split('UPGRADE = r"""', 1)[1].split('"""', 1)[0]
    definitions = []
    for name in names:
        found = re.search(rf"CREATE (?:OR REPLACE )?FUNCTION {name}\(.*?\nEND \$\$;\n", upgrade, re.S)
        if found is None:
            raise RuntimeError(f"{migration} does not define {name}: cannot restore it")
        statement = found.group(0)
        if not statement.startswith("CREATE OR REPLACE"):
            statement = statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        definitions.append(statement)
    return "".join(definitions)
