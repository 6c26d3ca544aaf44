"""What every benchmark shares: its result row, the table, and ABBA interleaving.

Machines running these are shared and noisy, so an absolute time means little.
Each benchmark measures its subject and a raw baseline in the same run,
alternating the two in ABBA order so that drift hits both alike, and reports
the ratio of their medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence

import attrs

#: A batch of timed operations; returns seconds per operation.
Batch = Callable[[], Awaitable[float]]
#: The same, for benchmarks that drive other processes and need no event loop.
SyncBatch = Callable[[], float]


@attrs.frozen
class Result:
    """One benchmark's figures. Times are medians, in seconds per operation."""

    name: str
    subject: float
    baseline: float
    #: What the target bounds: ``"ratio"`` (subject / baseline) or ``"absolute"`` (subject).
    target_kind: str
    target: float
    #: How many samples each median is taken over.
    samples: int
    #: Anything the benchmark checked besides time; a non-empty problem makes it MISS.
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: Why the subject could not be measured at all (it failed); the row then MISSes.
    failure: str | None = None

    @property
    def ratio(self) -> float:
        """Subject median over baseline median."""
        return self.subject / self.baseline if self.baseline > 0 else float("inf")

    @property
    def passed(self) -> bool:
        """Whether the subject ran, the target is met and no check found a problem."""
        if self.failure is not None:
            return False
        measured = self.ratio if self.target_kind == "ratio" else self.subject
        return measured <= self.target and not self.problems

    @property
    def target_text(self) -> str:
        """The target as printed: ``<= 2x`` or ``<= 1.000 ms``."""
        if self.target_kind == "ratio":
            return f"<= {self.target:g}x"
        return f"<= {format_time(self.target)}"

    @classmethod
    def failed(
        cls,
        name: str,
        reason: str,
        baseline: float,
        target: float,
        samples: int,
        notes: tuple[str, ...] = (),
    ) -> Result:
        """A row whose subject failed (`reason`), beside the baseline that was measured."""
        return cls(name, 0.0, baseline, "ratio", target, samples, notes=notes, failure=reason)


def format_time(seconds: float) -> str:
    """``12.34 us``, ``1.234 ms`` or ``1.234 s``."""
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def format_table(results: Sequence[Result]) -> str:
    """The results as a plain-text table, one row per benchmark, notes beneath."""
    header = ("benchmark", "subject median", "baseline median", "ratio", "target", "result")
    rows = [
        (
            r.name,
            format_time(r.subject) if r.failure is None else f"fails: {r.failure}",
            format_time(r.baseline),
            # An absolute row against a baseline of nothing (an idle window's CPU) has no ratio.
            f"{r.ratio:.2f}x" if r.failure is None and r.baseline > 0 else "-",
            r.target_text,
            "PASS" if r.passed else "MISS",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    rule = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), rule, *lines, rule]
    for r in results:
        for problem in r.problems:
            out.append(f"{r.name}: PROBLEM: {problem}")
        for note in r.notes:
            out.append(f"{r.name}: {note}")
    return "\n".join(line.rstrip() for line in out)


async def interleave(subject: Batch, baseline: Batch, rounds: int) -> tuple[float, float]:
    """Run `rounds` batches of each in ABBA order; return (subject, baseline) medians.

    One warm-up batch of each runs first and is not counted.
    """
    subject_times, baseline_times = await interleave_samples(subject, baseline, rounds)
    return statistics.median(subject_times), statistics.median(baseline_times)


async def interleave_samples(
    subject: Batch, baseline: Batch, rounds: int, *, warm_up: bool = True
) -> tuple[list[float], list[float]]:
    """`interleave`, returning every sample rather than the medians."""
    if warm_up:
        await subject()
        await baseline()
    subject_times: list[float] = []
    baseline_times: list[float] = []
    for n in range(rounds):
        if n % 2 == 0:
            subject_times.append(await subject())
            baseline_times.append(await baseline())
        else:
            baseline_times.append(await baseline())
            subject_times.append(await subject())
    return subject_times, baseline_times


def interleave_sync(
    subject: SyncBatch, baseline: SyncBatch, rounds: int, *, warm_up: bool = True
) -> tuple[float, float]:
    """`interleave` for batches that need no event loop (they run other processes)."""
    if warm_up:
        subject()
        baseline()
    subject_times: list[float] = []
    baseline_times: list[float] = []
    for n in range(rounds):
        if n % 2 == 0:
            subject_times.append(subject())
            baseline_times.append(baseline())
        else:
            baseline_times.append(baseline())
            subject_times.append(subject())
    return statistics.median(subject_times), statistics.median(baseline_times)


def interleave_sync_many(batches: Sequence[SyncBatch], rounds: int) -> list[float]:
    """`interleave_sync` for several batches: each round runs them all, in an order that
    reverses every round (ABC, CBA, ...); one warm-up of each first. Their medians."""
    for batch in batches:
        batch()
    times: list[list[float]] = [[] for _ in batches]
    for n in range(rounds):
        order = range(len(batches)) if n % 2 == 0 else reversed(range(len(batches)))
        for index in order:
            times[index].append(batches[index]())
    return [statistics.median(series) for series in times]
