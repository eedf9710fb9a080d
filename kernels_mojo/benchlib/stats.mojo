# JSON formatting of the timing samples and numbers (the statistics are the driver's: driver/stats.py).

from std.math import isnan, isinf


def json_samples(samples_us: List[Float64]) -> String:
    """The raw timing samples as a JSON array (3 decimals, nanoseconds), in the order timed. The driver computes
    every statistic from them (driver/stats.py): the executables print no p50 of their own."""
    var s = String("[")
    for i in range(len(samples_us)):
        if i > 0:
            s += ","
        s += json_fixed3(samples_us[i])
    s += "]"
    return s


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
