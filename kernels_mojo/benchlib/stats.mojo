# Timing statistics and JSON number formatting.

from std.math import isnan, isinf


struct TimingStats(Copyable, Movable):
    var p50_us: Float64
    var p90_us: Float64
    var min_us: Float64
    var mean_us: Float64

    def __init__(out self, var samples_us: List[Float64]):
        """Nearest-rank percentiles over the samples (0 for no samples)."""
        var n = len(samples_us)
        if n == 0:
            self.p50_us = 0
            self.p90_us = 0
            self.min_us = 0
            self.mean_us = 0
            return
        sort(samples_us)
        self.p50_us = samples_us[_rank_index(n, 50)]
        self.p90_us = samples_us[_rank_index(n, 90)]
        self.min_us = samples_us[0]
        var total = Float64(0)
        for s in samples_us:
            total += s
        self.mean_us = total / Float64(n)


def _rank_index(n: Int, percent: Int) -> Int:
    # nearest rank: ceil(p/100 * n) - 1
    var idx = (percent * n + 99) // 100 - 1
    return max(0, min(n - 1, idx))


def json_number(x: Float64) -> String:
    """A JSON-safe number: `null` for NaN/inf, else Mojo's shortest repr."""
    if isnan(x) or isinf(x):
        return "null"
    return String(x)


def json_fixed3(x: Float64) -> String:
    """Non-negative number with 3 decimals (times, bandwidths)."""
    if isnan(x) or isinf(x):
        return "null"
    var neg = x < 0
    var scaled = Int((abs(x) * 1000.0) + 0.5)
    var frac = scaled % 1000
    var frac_str = String(frac)
    while frac_str.byte_length() < 3:
        frac_str = "0" + frac_str
    return String("-" if neg else "", scaled // 1000, ".", frac_str)


def json_string(s: String) -> String:
    return String('"', s, '"')
