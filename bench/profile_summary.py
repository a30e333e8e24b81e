"""Read a py-spy collapsed-stack profile (``--format raw``): hottest frames and an SVG flame graph.

Run by hand: ``python bench/profile_summary.py PROFILE.txt [--top 15] [--svg OUT.svg]``.
``bench_holds.py --profile`` calls it on the profiles it records.

A collapsed-stack file has one line per distinct stack, root first, frames joined by
``;``, then a space and the number of samples that saw it. ``bench_holds.py`` records
with ``--idle --threads --function --subprocesses``: every thread of every service
process (``--workers``), idle or not, 100 times a second.
The summary reads the threads that run the event loops (``MainThread`` of each process,
merged; the other threads wait in their queues), a wall-clock picture of them,
and per frame (function and file) it counts:

- ``self``: samples where the frame was the innermost one (where the thread was:
  running, or waiting for the client or PostgreSQL: in ``EpollSelector.select`` with
  asyncio's own loop, in ``Runner.run``'s self share with uvloop, whose loop is C);
- ``total``: samples where it was anywhere on the stack (counted once per sample,
  so recursion does not count twice);

as shares of that thread's samples, plus the self share per package (``sqlalchemy``,
``psycopg``, ``litestar``, ``asyncio``, ``ledger`` ...) and the project's own frames
by total share.

The same file opens in speedscope (it reads collapsed stacks) for interactive use.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# The repository's own folder, wherever it is checked out, so frames read "ledger/holds/reserve.py".
_ROOT = str(Path(__file__).resolve().parents[1]) + "/"
_SITE = re.compile(r"\((?:[^()]*/)?(?:site-packages|lib/python3\.\d+)/")


def short_frame(frame: str) -> str:
    """``select (/usr/lib/python3.11/selectors.py)`` -> ``select (selectors.py)``; work tree made relative."""
    frame = _SITE.sub("(", frame)
    return frame.replace(_ROOT, "")


def read_stacks(path: Path, thread: str | None = "MainThread") -> list[tuple[list[str], int]]:
    """The (frames root first, sample count) pairs of a collapsed-stack file.

    Recorded with ``--threads``, each stack starts with ``thread (TID): NAME``; with `thread`
    set, only that thread's stacks are kept and the thread frame is dropped (the event loop
    runs in ``MainThread``; the other threads of the service sit idle in their queues).
    """
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.strip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames[0].startswith("process ") and thread is not None:  # --subprocesses: merge processes
            frames = frames[1:]
        if frames and frames[0].startswith("thread (") and thread is not None:
            if not frames[0].endswith(f": {thread}"):
                continue
            frames = frames[1:]
        stacks.append(([short_frame(f) for f in frames], int(count)))
    return stacks


def package_of(frame: str) -> str:
    """The top-level package or module a frame's file belongs to: ``sqlalchemy``, ``asyncio``, ``ledger``."""
    where = frame[frame.rfind("(") + 1 :].rstrip(")")
    first = where.split(":")[0].split("/")[0]
    return first.removesuffix(".py") or "?"


@dataclass(frozen=True)
class FrameShare:
    frame: str
    self_pct: float
    total_pct: float


@dataclass(frozen=True)
class Summary:
    samples: int
    by_package: list[tuple[str, float]]  # self share per package, largest first
    by_self: list[FrameShare]  # where the CPU was
    project: list[FrameShare]  # ledger/ and pricing/ frames by inclusive share


def hottest(stacks: list[tuple[list[str], int]], top: int = 10) -> Summary:
    """Shares of the samples: per package (self), `top` frames by self, `top` project frames by total."""
    samples = sum(count for _, count in stacks)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    under_loop: Counter[str] = Counter()
    for frames, count in stacks:
        if not frames:
            continue
        own[frames[-1]] += count
        packages[package_of(frames[-1])] += count
        for frame in set(frames):
            total[frame] += count
        # the project's frames under the event loop (not the launcher above it: cli.py's main)
        start = next((i for i, f in enumerate(frames) if package_of(f) == "asyncio"), len(frames))
        for frame in set(frames[start + 1 :]):
            if package_of(frame) in ("ledger", "pricing"):
                under_loop[frame] += count
    if samples == 0:
        return Summary(0, [], [], [])

    def share(frame: str) -> FrameShare:
        return FrameShare(frame, 100.0 * own[frame] / samples, 100.0 * total[frame] / samples)

    project = [f for f, _ in under_loop.most_common(top)]
    return Summary(
        samples=samples,
        by_package=[(name, 100.0 * n / samples) for name, n in packages.most_common(12)],
        by_self=[share(frame) for frame, _ in own.most_common(top)],
        project=[share(frame) for frame in project],
    )


def format_summary(summary: Summary) -> str:
    lines = [
        f"{summary.samples} samples of the event loop thread(s); waiting is EpollSelector.select (asyncio's"
        " loop) or Runner.run's self share (uvloop, whose loop and waiting are C)"
    ]
    lines.append("  self% by package: " + ", ".join(f"{name} {pct:.1f}" for name, pct in summary.by_package))
    lines.append("  self%  total%  hottest frames (where the thread was)")
    lines += [f"  {s.self_pct:5.1f}  {s.total_pct:6.1f}  {s.frame}" for s in summary.by_self]
    lines.append("  self%  total%  ledger/pricing frames by total (what the time was spent under)")
    lines += [f"  {s.self_pct:5.1f}  {s.total_pct:6.1f}  {s.frame}" for s in summary.project]
    return "\n".join(lines)


@dataclass
class _Node:
    name: str
    count: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(stacks: list[tuple[list[str], int]]) -> _Node:
    root = _Node("all")
    for frames, count in stacks:
        root.count += count
        node = root
        for frame in frames:
            node = node.children.setdefault(frame, _Node(frame))
            node.count += count
    return root


def _colour(name: str) -> str:
    digest = hashlib.blake2s(name.encode(), digest_size=3).digest()
    return f"rgb({205 + digest[0] % 50},{80 + digest[1] % 120},{40 + digest[2] % 40})"


def flame_svg(stacks: list[tuple[list[str], int]], title: str, width: int = 1600) -> str:
    """An icicle graph (root on top) of the stacks as a self-contained SVG; hover a box for its numbers."""
    root = _tree(stacks)
    row, char = 16, 6.6
    boxes: list[str] = []
    depth_max = 0

    def draw(node: _Node, x: float, depth: int) -> None:
        nonlocal depth_max
        w = width * node.count / root.count if root.count else 0.0
        if w < 0.5:
            return
        depth_max = max(depth_max, depth)
        y = 30 + depth * row
        pct = 100.0 * node.count / root.count
        label = html.escape(f"{node.name} — {node.count} samples, {pct:.1f}%")
        text = (
            node.name
            if len(node.name) * char < w - 4
            else node.name[: max(0, int((w - 4) / char) - 2)] + ".."
        )
        boxes.append(
            f'<g><title>{label}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="{_colour(node.name)}" rx="2"/>'
            + (f'<text x="{x + 3:.1f}" y="{y + 12}">{html.escape(text)}</text>' if w > 3 * char else "")
            + "</g>"
        )
        child_x = x
        for child in sorted(node.children.values(), key=lambda c: c.name):
            draw(child, child_x, depth + 1)
            child_x += width * child.count / root.count

    draw(root, 0.0, 0)
    height = 30 + (depth_max + 2) * row
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">'
        f'<text x="4" y="18" font-size="14">{html.escape(title)}</text>' + "".join(boxes) + "</svg>\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--svg", type=Path, default=None, help="also write a flame graph here")
    parser.add_argument("--thread", default="MainThread", help="the thread to read (default MainThread)")
    parser.add_argument("--all-threads", action="store_true", help="read every thread, thread frames kept")
    args = parser.parse_args()
    stacks = read_stacks(args.profile, None if args.all_threads else args.thread)
    print(format_summary(hottest(stacks, args.top)))
    if args.svg:
        args.svg.write_text(flame_svg(stacks, f"{args.profile} ({args.thread})"), encoding="utf-8")
        print(f"flame graph: {args.svg}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
