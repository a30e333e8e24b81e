"""CPU seconds used by processes and by the whole machine, read from /proc (Linux only).

A benchmark on a small machine shares its cores between the load client, the service
and PostgreSQL, so every run reports who used how much: the load client from
``wait4``'s resource usage, a long-lived process from ``/proc/<pid>/stat`` before and
after, PostgreSQL as its postmaster plus every backend (live ones from their own
``stat``, exited ones from the postmaster's waited-for children), and the machine from
``/proc/stat``. What the machine used beyond those is "other": another process on
the box, or kernel time (loopback networking in softirq) that no process is billed for.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int, tid: int | None = None) -> list[str]:
    raw = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def process_cpu(pid: int, *, reaped_children: bool = False, tid: int | None = None) -> float:
    """utime + stime in seconds of a process (or its thread `tid`), plus its waited-for children if asked."""
    try:
        f = _stat_fields(pid, tid)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return 0.0
    ticks = int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if reaped_children else 0)
    return ticks / CLK_TCK


def postgres_cpu(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server: postmaster, its live backends and the ones that have exited."""
    if postmaster is None:
        return float("nan")
    total = process_cpu(postmaster, reaped_children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat_fields(int(entry.name))[1]) == postmaster:
                total += process_cpu(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return total


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over all cores since boot; busy excludes idle and iowait."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])
    return total - values[3] - values[4], total


@dataclass
class CpuWindow:
    """CPU used by the ledger server, PostgreSQL and the whole machine between start() and stop()."""

    server_pid: int | None
    postmaster: int | None
    server_s: float = 0.0
    server_main_s: float = 0.0  # the server processes' main threads (each runs one event loop)
    postgres_s: float = 0.0
    machine_busy_s: float = 0.0  # core-seconds: up to wall seconds x cores
    machine_busy_pct: float = 0.0  # of every core
    _before: tuple[float, float, float, int, int] = (0.0, 0.0, 0.0, 0, 0)

    def _server(self) -> tuple[float, float]:
        """(whole process tree, sum of each process's main thread): uvicorn --workers forks children."""
        if not self.server_pid:
            return 0.0, 0.0
        tree = process_tree(self.server_pid)
        whole = process_cpu(self.server_pid, reaped_children=True)
        whole += sum(process_cpu(pid) for pid in tree if pid != self.server_pid)
        return whole, sum(process_cpu(pid, tid=pid) for pid in tree)

    def start(self) -> None:
        busy, total = machine_jiffies()
        server, main = self._server()
        self._before = (server, main, postgres_cpu(self.postmaster), busy, total)

    def stop(self) -> None:
        busy, total = machine_jiffies()
        server, main = self._server()
        time.sleep(0.3)  # let the postmaster reap backends that have just exited
        self.server_s = server - self._before[0]
        self.server_main_s = main - self._before[1]
        self.postgres_s = postgres_cpu(self.postmaster) - self._before[2]
        self.machine_busy_s = (busy - self._before[3]) / CLK_TCK
        self.machine_busy_pct = 100.0 * (busy - self._before[3]) / max(1, total - self._before[4])


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, float, float]:
    """Run a load client to completion: (exit code, output, its CPU seconds, wall seconds)."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        return proc.returncode, out.read(), usage.ru_utime + usage.ru_stime, wall


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                if int(_stat_fields(int(entry.name))[1]) == pid:
                    found.append(int(entry.name))
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and all its live descendants."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                parents[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree
