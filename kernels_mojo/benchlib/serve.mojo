# `--serve`: one process serves case after case (the driver's long-lived
# worker, driver/workers.py; the CUDA SDPA runner speaks the same protocol).
#
#   worker -> driver  {"worker_ready":true}                  once, before touching the GPU
#   driver -> worker  --sizes<TAB>256K<TAB>--ngpus<TAB>2 ...  one case per line: the one-shot
#                                                            arguments, TAB-separated ('\r\n' ok)
#   worker -> driver  {...}                                  the one-shot run's JSON lines
#   worker -> driver  {"worker_end":true,"rc":RC,"error":"MSG"}
#
# RC is the one-shot run's exit code, MSG the text of its `error:` line (still
# printed on stderr), empty for RC 0. Empty lines are ignored; EOF ends the
# worker with 0. After RC 2 (bad configuration) the worker takes the next
# case; after any other non-zero RC it exits with that code (the driver
# starts a fresh one). The GPU contexts live in a ContextCache kept across
# cases (benchlib/runner.mojo).

from std.io.file_descriptor import RawFileDescriptor
from std.sys import stderr

from .cli import EXIT_BAD_INPUT, EXIT_RUN_FAILED, case_status
from .runner import ContextCache

comptime SERVE_FLAG = "--serve"
comptime READY_LINE = '{"worker_ready":true}'
comptime _READ_CHUNK = 4096


def json_escape(s: String) -> String:
    """`s` as a JSON string literal (quotes, backslashes, control bytes
    escaped; other bytes, UTF-8 included, copied through)."""
    var out = List[UInt8]()
    out.append(0x22)
    var hex = "0123456789abcdef".as_bytes()
    for b in s.as_bytes():
        var c = Int(b)
        if c == 0x22 or c == 0x5C:
            out.append(0x5C)
            out.append(b)
        elif c == 0x0A:
            out.append(0x5C)
            out.append(0x6E)  # n
        elif c == 0x0D:
            out.append(0x5C)
            out.append(0x72)  # r
        elif c == 0x09:
            out.append(0x5C)
            out.append(0x74)  # t
        elif c < 0x20 or c == 0x7F:
            for u in "\\u00".as_bytes():
                out.append(u)
            out.append(hex[c // 16])
            out.append(hex[c % 16])
        else:
            out.append(b)
    out.append(0x22)
    return String(from_utf8_lossy=Span(out))


def end_line(code: Int, message: String) -> String:
    """The end line of one case (`message` is dropped when `code` is 0)."""
    return String('{"worker_end":true,"rc":', code, ',"error":', json_escape(message if code != 0 else ""), "}")


def split_request(line: String) -> List[String]:
    """One request line's arguments: split on TAB, each piece kept as is (an
    argv element may be empty, as on a command line)."""
    var args = List[String]()
    for piece in line.split("\t"):
        args.append(String(piece))
    return args^


def take_line(mut pending: List[UInt8], eof: Bool) -> Optional[String]:
    """Take the first complete line out of `pending` (without its '\\n' and a
    '\\r' before it); at EOF, a last unterminated line. None: no line yet."""
    var end = -1
    for i in range(len(pending)):
        if pending[i] == 0x0A:
            end = i
            break
    var consumed: Int
    if end >= 0:
        consumed = end + 1
    elif eof and len(pending) > 0:
        end = len(pending)
        consumed = end
    else:
        return None
    if end > 0 and pending[end - 1] == 0x0D:
        end -= 1
    var line = String(from_utf8_lossy=Span(pending)[0:end])
    pending = List[UInt8](Span(pending)[consumed:])
    return line^


struct LineReader(Movable):
    """Reads '\\n'-terminated lines from a file descriptor (stdin: 0) through
    its own buffer: returns a line as soon as it is complete, so a request is
    answered without waiting for the next. (builtin input() drops what the
    same read brought after the first line: unusable on a pipe.)"""

    var fd: RawFileDescriptor
    var pending: List[UInt8]
    var eof: Bool

    def __init__(out self, fd: Int = 0):
        self.fd = RawFileDescriptor(Int32(fd))
        self.pending = List[UInt8]()
        self.eof = False

    def read_line(mut self) raises -> Optional[String]:
        """The next line, or None at EOF."""
        while True:
            var line = take_line(self.pending, self.eof)
            if line or self.eof:
                return line^
            var chunk = List[UInt8](length=_READ_CHUNK, fill=0)
            var got = Int(self.fd.read_bytes(Span(chunk)))
            if got == 0:
                self.eof = True
            else:
                self.pending.extend(Span(chunk)[0:got])


def wants_serve(args: List[String]) -> Bool:
    for a in args:
        if a == SERVE_FLAG:
            return True
    return False


def serve_requests[run_case: def(List[String], mut ContextCache) raises thin -> None]() -> Int:
    """The `--serve` loop; returns the exit code (0 at EOF, else the code of
    the case that ended it). `run_case` runs one case as the one-shot run
    would (its JSON lines on stdout), raising coded_error / any Error."""
    print(READY_LINE, flush=True)
    var cache = ContextCache()
    var reader = LineReader(0)
    while True:
        var line: Optional[String]
        try:
            line = reader.read_line()
        except e:
            print(String("error: reading requests from stdin failed: ", e), file=stderr)
            return EXIT_RUN_FAILED
        if not line:
            return 0
        var text = line.take()
        if text.byte_length() == 0:
            continue
        var code = 0
        var message = String()
        try:
            run_case(split_request(text), cache)
        except e:
            var status = case_status(e)
            code = status.code
            message = status.message
            print(String("error: ", message), file=stderr)
        print(end_line(code, message), flush=True)
        if code != 0 and code != EXIT_BAD_INPUT:
            return code
