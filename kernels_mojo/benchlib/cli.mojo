# Command line of allreduce_bench (nccl-tests-like vocabulary).

from std.sys import argv, exit, stderr

# The runners' exit codes, by name: driver/errors.py RunnerExit holds the same names and
# numbers, and the driver reads each by its name (docs/BUILD.md, "Kernel executable interface").
comptime EXIT_RUN_FAILED = 1
comptime EXIT_BAD_INPUT = 2
comptime EXIT_NO_GPU = 4


def fail(code: Int, message: String):
    """Print one `error: ...` line on stderr and exit with `code`."""
    print(String("error: ", message), file=stderr)
    exit(code)


comptime _CODE_TAG = "[exit "
"""Prefix of an Error that carries its exit code: `[exit 2] message`."""


def coded_error(code: Int, message: String) -> Error:
    """An Error carrying the exit code the one-shot run ends with and the text
    of its `error:` line (what `fail` would print); decoded by `case_status`.
    Code that may run inside `--serve` raises this instead of calling `fail`."""
    return Error(String(_CODE_TAG, code, "] ", message))


struct CaseStatus(Copyable, Movable):
    """How one case ended: the one-shot exit code and its `error:` text."""

    var code: Int
    var message: String

    def __init__(out self, code: Int, message: String):
        self.code = code
        self.message = message


def case_status(e: Error) -> CaseStatus:
    """Decode an Error raised by a case: `coded_error`'s code and text; any
    other Error is a run failure (exit 1, `run failed: ...`, as the one-shot
    run has always reported errors raised while running)."""
    var text = String(e)
    if text.startswith(_CODE_TAG):
        var close = text.find("] ")
        if close > 0:
            try:
                var code = atol(text[byte = _CODE_TAG.byte_length() : close])
                return CaseStatus(code, String(text[byte = close + 2 :]))
            except:
                pass
    return CaseStatus(EXIT_RUN_FAILED, String("run failed: ", text))


def command_line_args() -> List[String]:
    """argv without the program name."""
    var args = List[String]()
    var raw = argv()
    for i in range(1, len(raw)):
        args.append(String(raw[i]))
    return args^


def usage() -> String:
    return (
        "usage: allreduce_bench [--sizes 256K,16M,1G] [--dtype"
        " float32|bfloat16|float16] [--ngpus 2|4|8] [--iters N] [--warmup N] [--batch N] [--check-iters N]"
        " [--kernel auto|1stage|2stage|1stage_push|2stage_push|1stage_pushflag|1stage_bulk|2stage_ce|1stage_cpasync|noop]"
        " [--stages 2|3|4] [--max-blocks N]"
        " [--check 0|1] [--seed N] [--impl ours|upstream]"
        " [--debug-hang-rank R] [--debug-corrupt-element I] [--timing device|host] [--alternate 0|1] [--refresh-every N]"
        " [--lanes 1..4] [--mem-pressure PERCENT]"
    )


def _parse_int(text: String, what: String) raises -> Int:
    try:
        return atol(text)
    except:
        raise Error(String("malformed ", what, ": '", text, "' (expected an integer)"))


def parse_size_bytes(token: String) raises -> Int:
    """Bytes from '256K', '16M', '1G' (1024-based), plain integers, or a sum
    of such terms joined by '+' (e.g. '8K+28')."""
    var total = 0
    var terms = token.split("+")
    if len(terms) == 0:
        raise Error(String("malformed size: '", token, "'"))
    for term_slice in terms:
        var term = String(String(term_slice).strip())
        if term.byte_length() == 0:
            raise Error(String("malformed size: '", token, "'"))
        var multiplier = 1
        var last = term[byte = term.byte_length() - 1 :]
        var digits = term
        if last == "K" or last == "k":
            multiplier = 1024
        elif last == "M" or last == "m":
            multiplier = 1024 * 1024
        elif last == "G" or last == "g":
            multiplier = 1024 * 1024 * 1024
        if multiplier != 1:
            digits = String(term[byte = 0 : term.byte_length() - 1])
        var value: Int
        try:
            value = atol(digits)
        except:
            raise Error(String("malformed size: '", token, "' (use e.g. 256K, 16M, 1G or a byte count)"))
        if value < 0:
            raise Error(String("malformed size: '", token, "' (negative)"))
        total += value * multiplier
    return total


struct BenchConfig(Copyable, Movable):
    var sizes_bytes: List[Int]
    var dtype: String
    var ngpus: Int
    var iters: Int
    var warmup: Int
    var batch: Int  # iterations launched back to back per timing sample
    var check_iters: Int  # checked launches per size (poison, launch, check every element)
    var kernel: String
    var stages: Int  # 0 = not given
    var check: Bool
    var seed: Int
    var impl: String
    var debug_hang_rank: Int  # -1 = off
    var debug_corrupt_element: Int  # -1 = off; else rank 1's element I is moved out of its bound before the check
    var timing: String  # "device" (per-iteration CUDA events) | "host" (batched wall clock)
    var alternate: Bool  # stress: cycle every kernel in the checked launches
    var refresh_every: Int  # stress: fresh inputs every N checked launches (0 = never)
    var lanes: Int  # stress: independent allreduces in flight at once
    var mem_pressure: Float64  # stress: fraction of free GPU memory held by a filler
    var max_blocks: Int  # 0 = the build's grid cap; else a lower cap (fewer SMs)
    var help: Bool  # --help/-h seen: print usage, run nothing (exit 0)

    def __init__(out self):
        self.sizes_bytes = [256 * 1024, 16 * 1024 * 1024]
        self.dtype = "float32"
        self.ngpus = 2
        self.iters = 50
        self.warmup = 5
        self.batch = 1
        self.check_iters = 1
        self.kernel = "auto"
        self.stages = 0
        self.check = True
        self.seed = 1
        self.impl = "ours"
        self.debug_hang_rank = -1
        self.debug_corrupt_element = -1
        self.timing = "device"
        self.alternate = False
        self.refresh_every = 0
        self.lanes = 1
        self.mem_pressure = 0.0
        self.max_blocks = 0
        self.help = False


def element_bytes(dtype: String) -> Int:
    if dtype == "float32":
        return 4
    return 2


def refuse_bad_sizes(cfg: BenchConfig) raises:
    """Before any GPU is touched: every size whole elements, and a
    --debug-corrupt-element index inside every size (coded_error, exit 2)."""
    var elem_bytes = element_bytes(cfg.dtype)
    for s in cfg.sizes_bytes:
        if s % elem_bytes != 0:
            raise coded_error(EXIT_BAD_INPUT, String("size ", s, " bytes is not a multiple of the ", elem_bytes,
                                                      "-byte ", cfg.dtype, " element"))
        if cfg.debug_corrupt_element >= 0 and cfg.debug_corrupt_element >= s // elem_bytes:
            raise coded_error(EXIT_BAD_INPUT, String("--debug-corrupt-element ", cfg.debug_corrupt_element,
                                                      " is not an element of size ", s, " (", s // elem_bytes,
                                                      " ", cfg.dtype, " elements)"))


def parse_args(impl: String = "ours") raises -> BenchConfig:
    """Parse argv (see parse_arg_list); --help/-h prints the usage and exits 0."""
    var cfg = parse_arg_list(command_line_args(), impl)
    if cfg.help:
        print(usage(), file=stderr)
        exit(0)
    return cfg^


def parse_arg_list(args: List[String], impl: String = "ours") raises -> BenchConfig:
    """Parse one case's arguments (argv without the program name, or one
    `--serve` request); raises Error(message) for any bad option or value.
    --help/-h stops parsing there and returns with `help` set. `impl`: which
    executable is parsing ("ours": allreduce_bench, "upstream":
    upstream_bench); --impl, if given, must agree."""
    var cfg = BenchConfig()
    cfg.impl = impl
    var i = 0
    while i < len(args):
        var opt = args[i].copy()
        if opt == "--help" or opt == "-h":
            cfg.help = True
            return cfg^
        if i + 1 >= len(args):
            raise Error(String("option ", opt, " needs a value; ", usage()))
        var val = args[i + 1].copy()
        i += 2
        if opt == "--sizes":
            cfg.sizes_bytes = List[Int]()
            for tok in val.split(","):
                cfg.sizes_bytes.append(parse_size_bytes(String(tok)))
        elif opt == "--dtype":
            if val != "float32" and val != "bfloat16" and val != "float16":
                raise Error(String("unsupported dtype '", val, "' (supported: float32, bfloat16, float16)"))
            cfg.dtype = val
        elif opt == "--ngpus":
            cfg.ngpus = _parse_int(val, "--ngpus")
        elif opt == "--iters":
            cfg.iters = _parse_int(val, "--iters")
            if cfg.iters < 1:
                raise Error("--iters must be >= 1")
        elif opt == "--batch":
            cfg.batch = _parse_int(val, "--batch")
            if cfg.batch < 1:
                raise Error("--batch must be >= 1")
        elif opt == "--check-iters":
            cfg.check_iters = _parse_int(val, "--check-iters")
            if cfg.check_iters < 1:
                raise Error("--check-iters must be >= 1")
        elif opt == "--warmup":
            cfg.warmup = _parse_int(val, "--warmup")
            if cfg.warmup < 0:
                raise Error("--warmup must be >= 0")
        elif opt == "--kernel":
            if (val != "auto" and val != "1stage" and val != "2stage" and val != "1stage_push" and val != "1stage_cpasync"
                    and val != "2stage_push" and val != "1stage_pushflag" and val != "1stage_bulk"
                    and val != "2stage_ce" and val != "noop"):
                raise Error(String("unknown kernel '", val,
                                   "' (auto, 1stage, 2stage, 1stage_push, 2stage_push, 1stage_pushflag, 1stage_bulk, 2stage_ce,"
                                   " 1stage_cpasync; noop = diagnostic launch floor)"))
            cfg.kernel = val
        elif opt == "--stages":
            cfg.stages = _parse_int(val, "--stages")
            if cfg.stages < 2 or cfg.stages > 4:
                raise Error(String("--stages ", val, " unsupported (2, 3 or 4)"))
        elif opt == "--max-blocks":
            cfg.max_blocks = _parse_int(val, "--max-blocks")
            if cfg.max_blocks < 1 or cfg.max_blocks > 1024:
                raise Error("--max-blocks must be in [1, 1024]")
        elif opt == "--check":
            if val != "0" and val != "1":
                raise Error("--check takes 0 or 1")
            cfg.check = val == "1"
        elif opt == "--seed":
            cfg.seed = _parse_int(val, "--seed")
        elif opt == "--impl":
            if val != "ours" and val != "upstream":
                raise Error(String("unknown impl '", val, "' (ours, upstream)"))
            if val != impl:
                raise Error(String("--impl ", val, ": this executable runs impl ", impl,
                                   " (allreduce_bench: ours, upstream_bench: upstream)"))
        elif opt == "--debug-hang-rank":
            cfg.debug_hang_rank = _parse_int(val, "--debug-hang-rank")
        elif opt == "--debug-corrupt-element":
            cfg.debug_corrupt_element = _parse_int(val, "--debug-corrupt-element")
            if cfg.debug_corrupt_element < 0:
                raise Error("--debug-corrupt-element takes an element index >= 0")
        elif opt == "--timing":
            if val != "device" and val != "host":
                raise Error("--timing takes device or host")
            cfg.timing = val
        elif opt == "--alternate":
            if val != "0" and val != "1":
                raise Error("--alternate takes 0 or 1")
            cfg.alternate = val == "1"
        elif opt == "--refresh-every":
            cfg.refresh_every = _parse_int(val, "--refresh-every")
            if cfg.refresh_every < 0:
                raise Error("--refresh-every must be >= 0")
        elif opt == "--lanes":
            cfg.lanes = _parse_int(val, "--lanes")
            if cfg.lanes < 1 or cfg.lanes > 4:
                raise Error("--lanes must be 1, 2, 3 or 4")
        elif opt == "--mem-pressure":
            var pct = _parse_int(val, "--mem-pressure")
            if pct < 0 or pct > 95:
                raise Error("--mem-pressure takes a percentage of free GPU memory, 0..95")
            cfg.mem_pressure = Float64(pct) / 100.0
        else:
            raise Error(String("unknown option ", opt, "; ", usage()))
    if cfg.ngpus != 2 and cfg.ngpus != 4 and cfg.ngpus != 8:
        raise Error(String("unsupported --ngpus ", cfg.ngpus, " (supported: 2, 4, 8)"))
    if cfg.stages != 0 and cfg.kernel != "1stage_cpasync":
        raise Error("--stages applies only to --kernel 1stage_cpasync")
    if cfg.impl == "upstream" and cfg.kernel != "auto":
        raise Error("--kernel must be auto with --impl upstream (upstream picks its own kernel)")
    if cfg.impl == "upstream" and cfg.debug_hang_rank >= 0:
        raise Error("--debug-hang-rank is only supported with --impl ours")
    if cfg.alternate and cfg.kernel != "auto":
        raise Error("--alternate 1 cycles every kernel; it takes no --kernel")
    if cfg.impl == "upstream" and (cfg.alternate or cfg.lanes > 1 or cfg.mem_pressure > 0 or cfg.refresh_every > 0):
        raise Error("--alternate, --lanes, --mem-pressure and --refresh-every are only supported with --impl ours")
    if cfg.debug_corrupt_element >= 0 and (not cfg.check or cfg.kernel == "noop"):
        raise Error("--debug-corrupt-element needs a checked launch (--check 1, a kernel other than noop)")
    if cfg.debug_hang_rank >= cfg.ngpus:
        raise Error(String("--debug-hang-rank ", cfg.debug_hang_rank, " out of range (0..", cfg.ngpus - 1, ")"))
    return cfg^
