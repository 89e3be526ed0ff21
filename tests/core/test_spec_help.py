"""Help inside a spec comment (astra_cuda.model.spec_help, astra_cuda.model.tomlpos): positions of keys and
values, completion by context, hover docs per key, and where each of inference's notes belongs."""
from astra_cuda.model import source, spec_help, tomlpos

TEXT = '''/* @astra
grid = ["n"]   # a comment that says grid = 3
block = [256]
[sizes]
n = [1, 3]

[args]
out = { type = "half", shape = ["n"], output = true }
in = { type = "half", shape = ["n", "2 * d"], init = "normal" }
d = "n"
*/
__global__ void k(__half* out, const __half* in, const int d, float eps) {}
'''


def kernel(text=TEXT):
    return source.parse(text).kernel("k")


def test_positions_of_keys_values_and_elements_skip_comments():
    body = TEXT.split("@astra", 1)[1].rsplit("*/", 1)[0]
    places = tomlpos.index(body)
    lines = body.split("\n")

    def text(span):
        return lines[span[0]][span[1]:span[3]]
    assert text(places[("block",)].key) == "block" and text(places[("block",)].value) == "[256]"
    assert text(places[("sizes",)].key) == "[sizes]"
    assert text(places[("args", "in", "shape", "1")].value) == '"2 * d"'
    assert text(places[("args", "in", "init")].value) == '"normal"'
    assert tomlpos.index("grid = [") == {}   # what tomlkit cannot read has no places, never wrong ones


def labels(text, line, needle):
    row = text.split("\n")[line]
    return [c.label for c in spec_help.completions(kernel(text), line, row.index(needle) + len(needle))]


def test_completion_follows_the_cursor():
    assert "float" in labels(TEXT, 7, 'type = "')                         # element types
    assert "arange" in labels(TEXT, 8, 'init = "')                        # inits
    assert {"n", "cdiv"} <= set(labels(TEXT, 8, '"2 * '))                  # sizes and functions
    typing = TEXT.replace("d = \"n\"\n", "e\n")                           # broken TOML while typing
    assert "eps" in labels(typing, 9, "e") and "out" not in labels(typing, 9, "e")   # parameters not yet described
    assert "inout" in labels(TEXT.replace("output = true", "o"), 7, ", o") and \
        "type" not in labels(TEXT.replace("output = true", "o"), 7, ", o")
    top = TEXT.replace("block = [256]", "bl")
    assert "block" in labels(top, 2, "bl") and "grid" not in labels(top, 2, "bl")
    assert spec_help.completions(kernel(), 11, 3) == []                    # outside the comment


def test_hover_documents_the_key_under_the_cursor():
    doc, rng = spec_help.hover(kernel(), 7, TEXT.split("\n")[7].index("shape") + 2)
    assert "size expressions" in doc and rng == (7, TEXT.split("\n")[7].index("shape"), 7,
                                                 TEXT.split("\n")[7].index("shape") + 5)
    doc, _ = spec_help.hover(kernel(), 3, 2)
    assert doc.startswith("`[sizes]`")
    doc, _ = spec_help.hover(kernel(), 9, 0)
    assert "Parameter `d` of `k`: `const int`" in doc
    assert spec_help.hover(kernel(), 1, 40) is None   # inside a comment's words


def test_each_note_lands_on_the_line_it_is_about():
    comment = TEXT[:TEXT.index("__global__")]
    lines = comment.split("\n")
    notes = ["ran before it was proposed (cpu backend): the kernel ran on 10 cases",
             "`d`: a guess", "size `n`: the program itself uses 3",
             "no launch site of this kernel in the file or beside it: grid and block are guesses"]
    got = [(lines[g.line].split("=")[0].strip(), g.note) for g in spec_help.guessed_lines(comment, notes)]
    assert got == [("/* @astra", notes[0]), ("d", notes[1]), ("n", notes[2]), ("grid", notes[3]), ("block", notes[3])]


def test_a_pointer_to_structs_is_offered_records():
    text = TEXT.replace("float eps)", "const Seq* seqs)").replace('d = "n"', 'd = "n"\nseqs = { r')
    text = "struct Seq { int start; };\n" + text
    row = next(i for i, ln in enumerate(text.split("\n")) if ln.startswith("seqs = {"))
    assert "records" in labels(text, row, "{ r") and "records" not in labels(text, row - 3, ", o")
