"""What one read of the ledger-level figures (`ledger.figures`) costs on a grown journal.

Creates a throwaway database, posts N journal transactions straight in SQL through the
same triggers as the service (half deposits from funding, half charges to a revenue
shard, on a few hundred accounts), a few thousand reconciliation runs and alert events,
then times `read_figures` (what a scrape reads once per LEDGER_METRICS_CACHE_SECONDS):
a process's first read (the whole journal) and a steady one (the journal's tally kept).
The database is dropped at the end. Not part of `make test`.

    .venv/bin/python bench/bench_metrics_scrape.py --transactions 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import psycopg

from ledger.db import make_engine, migrate
from ledger.figures import read_figures
from ledger.figures.journal import JournalTally

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

SEED = """
INSERT INTO accounts (id, currency) SELECT 'bench-' || n, 'USD' FROM generate_series(1, 300) n;
INSERT INTO accounts (id, kind, currency) VALUES
  ('system:funding:USD', 'system', 'USD'), ('system:revenue:USD:00', 'system', 'USD')
  ON CONFLICT DO NOTHING;
DO $$
DECLARE t bigint; a text;
BEGIN
  FOR i IN 1..%(n)s LOOP
    a := 'bench-' || (1 + i %% 300);
    IF i %% 2 = 0 THEN
      INSERT INTO journal_transactions (kind, account_id, actor) VALUES ('deposit', a, 'bench')
        RETURNING id INTO t;
      INSERT INTO journal_entries (transaction_id, account_id, currency, amount)
        VALUES (t, a, 'USD', 1.5), (t, 'system:funding:USD', 'USD', -1.5);
    ELSE
      INSERT INTO journal_transactions (kind, account_id, actor, reason)
        VALUES ('adjustment', a, 'bench', 'bench charge') RETURNING id INTO t;
      INSERT INTO journal_entries (transaction_id, account_id, currency, amount)
        VALUES (t, a, 'USD', -0.000316), (t, 'system:revenue:USD:00', 'USD', 0.000316);
    END IF;
  END LOOP;
END $$;
INSERT INTO reconciliation_runs (id, status, finished_at, trigger, actor, grace_seconds, settled_count,
                                 charged_amount, by_currency)
  SELECT gen_random_uuid(), 'succeeded', now(), 'schedule', 'scheduler', 60, 1, 0.0007,
         '{"USD": {"settled": 1, "released": 0, "charged_amount": "0.0007", "released_amount": "0.0063"}}'
    FROM generate_series(1, %(runs)s);
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10_000, help="reconciliation runs (a week at 1/min)")
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    name = f"ledger_bench_metrics_{os.getpid()}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rsplit("/", 1)[0] + "/" + name
    try:
        migrate(url)
        started = time.perf_counter()
        with psycopg.connect(url) as conn:
            conn.execute(SEED % {"n": args.transactions, "runs": args.runs})  # type: ignore[arg-type]
            conn.execute("ANALYZE")
        print(f"seeded {args.transactions} journal transactions in {time.perf_counter() - started:.1f} s")
        asyncio.run(time_reads(url, args.reads))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def time_reads(url: str, reads: int) -> None:
    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        await read_figures(engine)  # warm the table pages, as a live server's are
        full = []
        for _ in range(3):
            started = time.perf_counter()
            await read_figures(engine)  # a fresh tally: the whole journal (a process's first read)
            full.append(time.perf_counter() - started)
        tally = JournalTally()
        for _ in range(3):
            await read_figures(engine, tally)  # the frontier settles at the journal's end
        steady = []
        for _ in range(reads):
            started = time.perf_counter()
            figures = await read_figures(engine, tally)
            steady.append(time.perf_counter() - started)
        print(f"journal: {figures.journal_counts}, revenue: {figures.revenue}, frontier {tally.frontier}")
        print(f"first read of a process (whole journal): median {statistics.median(full) * 1000:.1f} ms")
        print(
            f"steady read (frontier at the end) over {reads} reads: median "
            f"{statistics.median(steady) * 1000:.1f} ms, max {max(steady) * 1000:.1f} ms"
        )
    finally:
        await engine.dispose()


if __name__ == "__main__":
    main()
