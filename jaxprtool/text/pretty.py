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

from .twin import twin

TEXT, BRK, CONCAT, GROUP, NEST, LAZY, FILL, LINES = 0, 1, 2, 3, 4, 5, 6, 7

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


def lazy(flat_text: str, builder, args: tuple = (), render=None) -> Doc:
    """A document whose flat rendering is `flat_text` and whose full form `builder(*args)`
    is built only when it does not fit.  Valid when every break of `builder(*args)` lies
    inside a group (then, if the whole fits, JAX prints it flat).  `render(out, k, indent,
    width, *args) -> k`, when given, lays the full form out directly (appending to `out`
    from column `k` in break mode at `indent`; the new column), as `format` would."""
    return (LAZY, flat_text, builder, args, render, _w(flat_text))


def fill(items: list[str], sep: str = "") -> Doc:
    """`nest(2, group(join(text(sep) + group(brk()), [text(i) for i in items])))`: JAX's
    `pp_vars` list, whose separators break one by one when the line is full."""
    if not items:
        return NIL
    flat_text = (sep + " ").join(items)
    return (FILL, items, sep, flat_text, _w(flat_text))


def lines(docs: list, sep: str = "; ", rebuild=None, width: int | None = None) -> Doc:
    """`join(brk(sep), docs)`, laid out without an agenda entry per item: the equations of a
    jaxpr, most of them one flat line each.  An item may be a plain string, the flat text of
    a document that `rebuild(i)` builds (the i-th item's) where that text does not fit;
    `width`: the items' flat width, where the caller knows it."""
    if not docs:
        return NIL
    if len(docs) == 1 and docs[0].__class__ is not str:
        return docs[0]
    if width is None:
        width = sum([_w(d) if d.__class__ is str else d[-1] for d in docs])
    return (LINES, docs, sep, 0, rebuild, width + _w(sep) * (len(docs) - 1))


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
        if d.__class__ is str:  # (an item of LINES)
            app(d)
            continue
        tag = d[0]
        if tag <= BRK or tag == LAZY:
            app(d[1])
        elif tag == CONCAT:
            extend(reversed(d[1]))
        elif tag == GROUP:
            push(d[1])
        elif tag == FILL:
            app(d[3])
        elif tag == LINES:
            sep = (BRK, d[2], 0)
            items = d[1]
            xs = [sep] * (2 * len(items) - 1)
            xs[::2] = items
            extend(reversed(xs))
        else:
            push(d[2])


def fill_broken(out: list[str], k: int, indent: int, width: int, items, sep: str) -> int:
    """A `fill` that does not fit, laid out from column `k` at `indent`; the new column."""
    app = out.append
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
    return k


def format(doc: Doc, width: int = 80, end: str = "") -> str:
    """Lay `doc` out at `width` columns, exactly as `jax._src.pretty_printer.Doc.format`;
    `end` follows it (joined with the lines: a program's final newline is not a copy of its
    text)."""
    out: list[str] = []
    for _ in _laid(doc, width, out, None):
        pass
    out.append(end)
    return "".join(out)


#: `format_pieces` hands out its text a run of about this many laid-out strings at a time
PIECE = 1 << 15


def format_pieces(doc: Doc, width: int = 80, end: str = ""):
    """`format(doc, width, end)` in pieces (strings, in order), each made as it is asked for:
    a writer that writes each before it asks for the next holds one piece at a time, never
    the whole text (75 MB for a gradient of 400k equations, in memory fresh from the
    system) nor the list of every line."""
    out: list[str] = []
    for _ in _laid(doc, width, out, PIECE):
        yield "".join(out)
        out.clear()
    out.append(end)
    yield "".join(out)


def _laid(doc: Doc, width: int, out: list[str], piece: int | None):
    """The layout loop of `format`, appending `doc`'s text to `out`; with `piece`, it
    yields (None) whenever `out` holds `piece` strings or more, for its reader to take them
    out, and lays out a run of at most `piece` lines at a time."""
    app = out.append
    k = 0
    compiled = twin()  # the compiled twin of the LINES loop over lines that fit, or None
    lay = compiled.lay_lines_until if compiled is not None else None
    # agenda entries: (indent, is_break_mode, doc)
    stack = [(0, True, doc)]
    pop = stack.pop
    push = stack.append
    while stack:
        if piece is not None and len(out) >= piece:
            yield
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
            if d[5] <= width - k:
                app(d[1])
                k += d[5]
            elif brk_mode and d[4] is not None:
                k = d[4](out, k, indent, width, *d[3])
            else:
                push((indent, brk_mode, d[2](*d[3])))
        elif tag == LINES:
            k = _lay_lines(d, indent, brk_mode, k, width, out, push, lay, piece)
        elif tag == FILL:
            if d[4] <= width - k:
                app(d[3])
                k += d[4]
            else:
                k = fill_broken(out, k, indent, width, d[1], d[2])
        else:  # NEST
            push((indent + d[1], brk_mode, d[2]))


def _lay_lines(
    d: Doc, indent: int, brk_mode: bool, k: int, width: int, out, push, lay, piece
) -> int:
    """`format` of LINES `d` from column `k`: each item after a break, a flat line if it fits
    (`lay`, the compiled twin of this loop over the strings that fit in break mode, where
    built), else laid out on the agenda (`push`), after it the rest of the items as a new
    LINES entry; at most `piece` items (None: all), the rest a new LINES entry; the new
    column."""
    app = out.append
    items = d[1]
    i = d[3]
    if brk_mode:
        nl = "\n" + " " * indent
        sep_w = indent
    else:
        nl = d[2]
        sep_w = _w(nl)
    n = len(items)
    stop = n if piece is None else min(n, i + piece)
    while i < stop:
        if lay is not None and brk_mode and i:  # (the loop's twin, to where it stops)
            i, w = lay(out, items, i, nl, width - indent, stop)
            if w >= 0:
                k = indent + w
            if i >= stop:
                break
        x = items[i]
        if i:
            app(nl)
            k = indent if brk_mode else k + sep_w
        i += 1
        if x.__class__ is str:
            w = len(x) if x.isascii() else len(x.encode("utf-8"))
            if w <= width - k:
                app(x)
                k += w
                continue
            x = d[4](i - 1)  # (its full document)
        t = x[0]
        if t == LAZY:
            if x[5] <= width - k:
                app(x[1])
                k += x[5]
                continue
            if brk_mode and x[4] is not None:
                k = x[4](out, k, indent, width, *x[3])
                continue
            x = x[2](*x[3])
        elif t == TEXT:
            app(x[1])
            k += x[2]
            continue
        if i < n:
            push((indent, brk_mode, (LINES, items, d[2], i, d[4], 0)))
        push((indent, brk_mode, x))
        return k
    if i < n:  # (the run of `piece` items ended: the rest after the reader's turn)
        push((indent, brk_mode, (LINES, items, d[2], i, d[4], 0)))
    return k
