"""A Wadler-Lindig document model with the exact layout semantics of JAX's printer.

JAX formats jaxprs with `jax._src.pretty_printer` (C++ `jaxlib/_pretty_printer`).
Its rules, reproduced here:

* the document starts in *break* mode at indentation 0 (a break outside every
  group is a newline);
* a group is printed flat iff its own flat width fits in what is left of the
  current line (`width - column`); the text that follows the group is *not*
  taken into account (JAX's comment: Lindig's paper passes the remainder, JAX
  does not);
* in flat mode a break prints its text; in break mode a newline followed by
  the indentation in effect;
* widths are counted in UTF-8 bytes (C++ `std::string::size`), and a text that
  contains newlines counts all its bytes.

Colour, annotations and source maps are not modelled (the tool prints with
default settings).  Documents are tuples `(tag, ..., flat_width)` so that
building and formatting large programs stays fast.
"""

from __future__ import annotations

TEXT, BRK, CONCAT, GROUP, NEST, LAZY, FILL = 0, 1, 2, 3, 4, 5, 6

Doc = tuple


def _w(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def text(s: str) -> Doc:
    return (TEXT, s, _w(s))


NIL = (TEXT, "", 0)


def nil() -> Doc:
    return NIL


def brk(s: str = " ") -> Doc:
    return (BRK, s, _w(s))


def concat(children) -> Doc:
    children = list(children)
    return (CONCAT, children, sum([c[-1] for c in children]))


def lazy(flat_text: str, builder) -> Doc:
    """A document whose flat rendering is `flat_text` and whose full form `builder()`
    is built only when it does not fit.  Valid when every break of `builder()` lies
    inside a group (then, if the whole fits, JAX prints it flat)."""
    return (LAZY, flat_text, builder, _w(flat_text))


def fill(items: list[str], sep: str = "") -> Doc:
    """`nest(2, group(join(text(sep) + group(brk()), [text(i) for i in items])))`: JAX's
    `pp_vars` list, whose separators break one by one when the line is full."""
    if not items:
        return NIL
    flat_text = (sep + " ").join(items)
    return (FILL, items, sep, flat_text, _w(flat_text))


def group(d: Doc) -> Doc:
    return (GROUP, d, d[-1])


def nest(n: int, d: Doc) -> Doc:
    return (NEST, n, d, d[-1])


def join(sep: Doc, docs) -> Doc:
    docs = list(docs)
    if not docs:
        return NIL
    if len(docs) == 1:
        return docs[0]
    xs = [docs[0]]
    for d in docs[1:]:
        xs.append(sep)
        xs.append(d)
    return (CONCAT, xs, sum([x[-1] for x in xs]))


def flat(d: Doc, out: list[str]) -> None:
    """Append the flat rendering of `d` (every break as its text) to `out`."""
    stack = [d]
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    app = out.append
    while stack:
        d = pop()
        tag = d[0]
        if tag <= BRK or tag == LAZY:
            app(d[1])
        elif tag == CONCAT:
            extend(reversed(d[1]))
        elif tag == GROUP:
            push(d[1])
        elif tag == FILL:
            app(d[3])
        else:
            push(d[2])


def format(doc: Doc, width: int = 80) -> str:
    """Lay `doc` out at `width` columns, exactly as `jax._src.pretty_printer.Doc.format`."""
    out: list[str] = []
    app = out.append
    k = 0
    # agenda entries: (indent, is_break_mode, doc)
    stack = [(0, True, doc)]
    pop = stack.pop
    push = stack.append
    while stack:
        indent, brk_mode, d = pop()
        tag = d[0]
        if tag == TEXT:
            app(d[1])
            k += d[2]
        elif tag == CONCAT:
            for c in reversed(d[1]):
                push((indent, brk_mode, c))
        elif tag == GROUP:
            if d[2] <= width - k:
                # fits: the whole group is flat, render it at once
                flat(d[1], out)
                k += d[2]
            else:
                push((indent, True, d[1]))
        elif tag == BRK:
            if brk_mode:
                app("\n" + " " * indent)
                k = indent
            else:
                app(d[1])
                k += d[2]
        elif tag == LAZY:
            if d[3] <= width - k:
                app(d[1])
                k += d[3]
            else:
                push((indent, brk_mode, d[2]()))
        elif tag == FILL:
            if d[4] <= width - k:
                app(d[3])
                k += d[4]
                continue
            items = d[1]
            sep = d[2]
            ws = len(sep)
            ind = indent + 2
            first = True
            for it in items:
                if not first:
                    app(sep)
                    k += ws
                    if k < width:  # group(brk()) fits iff 1 <= width - k
                        app(" ")
                        k += 1
                    else:
                        app("\n" + " " * ind)
                        k = ind
                first = False
                app(it)
                k += len(it) if it.isascii() else len(it.encode("utf-8"))
        else:  # NEST
            push((indent + d[1], brk_mode, d[2]))
    return "".join(out)
