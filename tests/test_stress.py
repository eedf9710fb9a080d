"""Stress stage pieces that need no GPU: sanitizer output parsing and random sizes."""

import random
from pathlib import Path

from driver.config import ELEM_BYTES
from driver.suites.stress import sanitizer, soak

ROOT = Path(__file__).resolve().parent.parent
# compute-sanitizer memcheck on upstream comm.allreduce, 2x H200, 2026-11-22 (provenance in tests/data/captured/README.md).
UPSTREAM_MEMCHECK = ROOT / "tests" / "data" / "captured" / "upstream_memcheck_h200x2.txt"


def test_parse_sanitizer_reads_the_summary_line_only():
    assert sanitizer.parse_sanitizer(UPSTREAM_MEMCHECK.read_text()) == 323


def test_parse_sanitizer_clean_and_missing():
    assert sanitizer.parse_sanitizer("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitizer.parse_sanitizer("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n") == 2
    assert sanitizer.parse_sanitizer("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n") == 0
    assert sanitizer.parse_sanitizer("Error: Target application returned an error\n") is None


def test_random_sizes_have_odd_tails_and_whole_elements():
    rng = random.Random(0)
    for dtype, e in ELEM_BYTES.items():
        for _ in range(20):
            sizes = soak.random_sizes(rng, dtype)
            assert all(s % e == 0 and s > 0 for s in sizes)
            assert any((s // e) % 8 for s in sizes)  # not all multiples of a 16-byte vector
