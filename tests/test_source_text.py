"""driver/source_text.py: the code of a C-family source without its comments, or None where unsure."""

from driver.source_text import c_code_lines


def test_comments_blank_lines_and_spacing_are_not_code():
    a = "#define N 4  // four\nint x = N;   /* a\n block */ int y;\n\n"
    b = "#define N 4\n\n// a note\nint x  =  N; int y;\n"
    assert c_code_lines(a) == c_code_lines(b) == ["#define N 4", "int x = N; int y;"]


def test_line_breaks_and_tokens_are_code():
    assert c_code_lines("#define A 1\nint x;") != c_code_lines("#define A 1 int x;")
    assert c_code_lines("int x = a - -b;") != c_code_lines("int x = a--b;")


def test_literals_are_kept_as_written():
    assert c_code_lines('puts("a // b");') == ['puts("a // b");']
    assert c_code_lines('puts("a  b");') != c_code_lines('puts("a b");')
    assert c_code_lines("char c = '/'; // x") == ["char c = '/';"]
    assert c_code_lines(r'puts("say \"/*\"");') == [r'puts("say \"/*\"");']


def test_what_the_reader_does_not_model_is_unsure():
    assert c_code_lines('auto s = R"(// not a comment)";') is None
    assert c_code_lines("// continued \\\nint x;") is None
    assert c_code_lines("int n = 1'000'000;") is None
    assert c_code_lines("/* never closed") is None
    assert c_code_lines('puts("never closed);\n') is None
