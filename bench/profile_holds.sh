#!/usr/bin/env sh
# Where the ledger server's time goes under the hold cycle: runs bench_holds.py with --profile,
# which records the service with py-spy during each workload and writes, per workload,
# bench/results/holds-<stamp>-profile-<workload>.txt (collapsed stacks: speedscope opens it)
# and .svg (flame graph of the event loop thread), and prints the hottest frames.
# Extra arguments go to bench_holds.py, e.g. `bench/profile_holds.sh --duration 10 --no-pgbench`.
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python bench/bench_holds.py --profile "$@"
