"""The code of a C-family source without its comments, so that a change that only rewrites comments (the
kernels' notes on experiments and measurements) can be told from one a compiler sees (driver/limits.py: a run
measured at commit X stays current at HEAD when only comments changed since X).

Conservative by construction: where the text holds something this reader does not model (a raw string literal,
a line comment continued by a backslash, an unterminated comment or literal), it answers None and the caller
must treat the file as changed."""

from __future__ import annotations

# The suffixes whose comments are C's: // to the end of the line, /* ... */ (not nested).
C_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"})


def c_code_lines(text: str) -> list[str] | None:
    """The lines of `text` with every comment replaced by one space (as the C preprocessor does), each line's
    runs of spaces and tabs collapsed to one and its ends stripped, and empty lines dropped; string and character
    literals kept verbatim. Two sources with equal lines differ only in comments, blank lines and the width of
    whitespace between tokens (never inside a literal, never a line break, which ends a preprocessor directive).
    None where the text holds what this reader does not model."""
    if 'R"' in text:  # a raw string literal may hold // or /* that are not comments
        return None
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            if text[i:end].rstrip("\r").endswith("\\"):  # the comment continues on the next line
                return None
            out.append(" ")
            i = end
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            end = text.find("*/", i + 2)
            if end < 0:
                return None
            out.append(" ")
            i = end + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\n":  # an unterminated literal: not C this reader follows
                    return None
                j += 2 if text[j] == "\\" else 1
            if j >= n or (c == "'" and not _one_character(text[i + 1:j])):  # 1'000 (a digit separator) or
                return None                                                  # not C this reader follows
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    lines = []
    for line in "".join(out).split("\n"):
        line = line.strip()
        if '"' not in line and "'" not in line:  # whitespace inside a literal is kept as it is
            line = " ".join(line.split())
        if line:
            lines.append(line)
    return lines


def _one_character(content: str) -> bool:
    """A character literal's content: one character, or one escape ('\\n', '\\0', '\\x7f')."""
    return (len(content) == 1 and content != "\\") or (content.startswith("\\") and 2 <= len(content) <= 4)
