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


def _png(fig, **savefig_kw) -> bytes:
    """The figure as a PNG of an adaptive palette of 256 colours, undithered: the same picture to the eye at about a
    third of the bytes (103 KB against 39 KB for an SDPA suite's plot), since every archived run's plot travels with
    each GPU call (64 MiB at most). Pillow, which matplotlib itself requires, makes the palette; where it does not load,
    matplotlib's own PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig_kw)
    try:
        from PIL import Image
    except ImportError:
        return buf.getvalue()
    out = io.BytesIO()
    # method 0: median cut, dither 0: none (the same numbers in every Pillow version)
    Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(colors=256, method=0, dither=0).save(
        out, format="PNG", optimize=True)
    return out.getvalue()


def _figure_bytes(fig) -> bytes:
    return _png(fig, dpi=120, bbox_inches="tight")


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
        ax.set_xticks([x + width * (len(bars) - 1) / 2 for x in range(len(shapes))],
                      [_case_label(shape, sd) for shape in shapes], fontsize=7)
        ax.set_ylabel("p50 (us, lower is better)")
        ax.set_title(f"SDPA forward on {run.device.kind} @ {run.git_sha[:8]} ({MODE_NOTE})", fontsize=9)
        ax.legend(fontsize=7)
        out["sdpa_p50.png"] = _figure_bytes(fig)
        plt.close(fig)
    return out


def _case_label(shape: str, records: list) -> str:
    """A bar group's label: the config's name, and under it the case's q and k/v shapes and mask where the case is
    not square (its lines' q_shape, kv_shape, causal)."""
    m = next(r.measurement for r in records if r.config.startswith(shape + "/"))
    q = m.q_shape or m.shape
    kv = m.kv_shape or q
    if kv == q and not m.causal:
        return shape
    return f"{shape}\nq {'x'.join(map(str, q))}\nkv {'x'.join(map(str, kv))}{' causal' if m.causal else ''}"


# One history line: its implementation (the colour), (x, p50 us) per run, and the points that stepped past the
# noise, slower and faster (driver/history.py).
HistoryLine = tuple[str, list[tuple[int, float]], list[tuple[int, float]], list[tuple[int, float]]]


def history(title: str, commits: list[str], lines: list[HistoryLine]) -> bytes | None:
    """p50 per config over the runs in commit order (x: the runs, labelled by commit), log scale, one colour per
    implementation; a step beyond the noise is marked where it happened. None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        from matplotlib.collections import LineCollection
    except ImportError:
        return None
    impls = sorted({impl for impl, *_ in lines})
    palette = [f"C{i}" for i in range(10)] if len(impls) <= 10 else list(matplotlib.colormaps["tab20"].colors)
    colors = {impl: palette[i % len(palette)] for i, impl in enumerate(impls)}
    fig, ax = plt.subplots(figsize=(max(10.0, min(18.0, 0.25 * len(commits))), 5))
    # one collection per implementation, one scatter per kind of step: thousands of sweep lines draw in a second
    for impl in impls:
        segs = [pts for i, pts, _s, _f in lines if i == impl]
        ax.add_collection(LineCollection(segs, colors=colors[impl], linewidths=0.8, alpha=0.6, label=impl))
        dots = [xy for seg in segs for xy in seg]
        ax.scatter([x for x, _ in dots], [y for _, y in dots], s=4, color=colors[impl], alpha=0.6)
    for which, marker, color in ((2, "v", "red"), (3, "^", "green")):
        marks = [xy for line in lines for xy in line[which]]
        ax.scatter([x for x, _ in marks], [y for _, y in marks], s=30, marker=marker, color=color, zorder=3,
                   label=f"{'slower' if which == 2 else 'faster'} step (past the noise)")
    ax.autoscale()
    step = max(1, len(commits) // 40)
    ax.set_xticks(range(0, len(commits), step), commits[::step], rotation=90, fontsize=6)
    ax.set_yscale("log")
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # tick labels are most of the drawing time
    ax.set_xlabel("archived runs in commit order (commit)")
    ax.set_ylabel("p50 (us, lower is better)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.subplots_adjust(left=0.07, right=0.78, top=0.92, bottom=0.2)  # fixed: a tight box draws the figure twice
    png = _png(fig, dpi=100)
    plt.close(fig)
    return png
