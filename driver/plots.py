"""PNG plots for the archive: allreduce algbw vs size, SDPA p50 per shape and variant.

matplotlib is optional on a GPU host: without it the run is archived without
plots and COMPARE.md says so.
"""

from __future__ import annotations

import io
from collections import defaultdict

from driver.records import ArchivedRecord, RunArchive

MODE_STYLE = {"cold": "-", "hot": "--"}
MODE_NOTE = "cold: each launch alone; hot: back to back, hatched / dashed"


def _figure_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return buf.getvalue()


def timed(run: RunArchive, suite: str) -> list[ArchivedRecord]:
    """The records of `suite` that carry timings: what the plots draw."""
    return [r for r in run.records if r.suite == suite and r.round_p50_us]


def plottable(run: RunArchive) -> bool:
    return any(timed(run, suite) for suite in ("allreduce", "sdpa"))


def render(run: RunArchive) -> dict[str, bytes]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out: dict[str, bytes] = {}
    ar = timed(run, "allreduce")
    if ar:
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for r in ar:
            m = r.measurement
            label = f"{r.impl}" if r.impl != "ours" else f"ours {r.kernel}"
            series[(r.timing_mode, f"{label} {m.dtype} x{m.ngpus} {r.timing_mode}")].append((m.bytes, m.algbw_gbps))
        fig, ax = plt.subplots(figsize=(8, 5))
        for (mode, label), pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if mode == "cold" else "s",
                    linestyle=MODE_STYLE[mode], label=label)
        for name, gbps in run.ceilings_gbps.items():
            ax.axhline(gbps, linestyle="--", color="gray", label=f"ceiling: {name} {gbps:.0f} GB/s")
        link = run.ceilings_gbps.get("p2p_copy_gpu0_gpu1")
        if link:  # the right axis reads the same curves as link_frac, the share of the measured link ceiling
            sec = ax.secondary_yaxis("right", functions=(lambda g, c=link: g / c, lambda f, c=link: f * c))
            sec.set_ylabel("link_frac (algbw / measured link ceiling)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("algbw (GB/s, from p50)")
        ax.set_title(f"allreduce on {run.device.kind} @ {run.git_sha[:8]} ({MODE_NOTE})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        out["allreduce_algbw.png"] = _figure_bytes(fig)
        plt.close(fig)
    sd = timed(run, "sdpa")  # the timed (first) seed per shape
    if sd:
        shapes = sorted({r.config.split("/")[0] for r in sd})
        # one bar per implementation, precision tier and mode (the tier named where the run timed two)
        bars = sorted({(r.impl, r.precision or "", r.timing_mode) for r in sd}, key=lambda b: (b[2] != "cold", b[:2]))
        two_tiers = len({b[1] for b in bars}) > 1
        fig, ax = plt.subplots(figsize=(9, 5))
        width = 0.8 / len(bars)
        for i, (impl, tier, mode) in enumerate(bars):
            vals = []
            for shape in shapes:
                hits = [r.measurement.p50_us for r in sd if (r.impl, r.precision or "", r.timing_mode) ==
                        (impl, tier, mode) and r.config.startswith(shape + "/")]
                vals.append(hits[0] if hits else 0.0)
            label = f"{impl} {tier} {mode}" if two_tiers else f"{impl} {mode}"
            ax.bar([x + i * width for x in range(len(shapes))], vals, width=width, label=label,
                   hatch=None if mode == "cold" else "//", edgecolor="black", linewidth=0.5)
        ax.set_xticks([x + width * (len(bars) - 1) / 2 for x in range(len(shapes))], shapes)
        ax.set_ylabel("p50 (us, lower is better)")
        ax.set_title(f"SDPA forward on {run.device.kind} @ {run.git_sha[:8]} ({MODE_NOTE})", fontsize=9)
        ax.legend(fontsize=7)
        out["sdpa_p50.png"] = _figure_bytes(fig)
        plt.close(fig)
    return out
