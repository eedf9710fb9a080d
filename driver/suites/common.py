"""What every suite shares: its result container, progress lines, ratio verdicts."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from driver.records import ArchivedRecord, Skip, Verdict

_T0 = time.perf_counter()


@dataclass
class SuiteResult:
    records: list[ArchivedRecord] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    ceilings_gbps: dict[str, float] = field(default_factory=dict)

    def extend(self, other: SuiteResult) -> None:
        self.records += other.records
        self.skipped += other.skipped
        self.ceilings_gbps.update(other.ceilings_gbps)


def progress(what: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f} s] {what}", file=sys.stderr, flush=True)


def ratio_verdict(label: str, *, ours_us: float, peer_us: float, min_ratio: float, noise: float) -> Verdict:
    """Speedup = peer time / our time. Within `noise` of the floor is inconclusive."""
    if ours_us <= 0:
        return Verdict(status="inconclusive", reasons=[f"{label}: our time is 0"])
    ratio = peer_us / ours_us
    text = f"{label}: {ratio:.2f}x (ours {ours_us:.2f} us, peer {peer_us:.2f} us, floor {min_ratio:.2f}x)"
    if abs(ratio - min_ratio) <= noise * min_ratio:
        return Verdict(status="inconclusive", reasons=[text])
    return Verdict(status="pass" if ratio >= min_ratio else "fail", reasons=[text])
