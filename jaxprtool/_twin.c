/* The compiled twin of the two per-line loops (issue 49): the plain-line reader of the
 * parser's fast path (`text/parser/fast.py`, `FastPath.read_run`'s first loop) and the
 * printer's equation-line builder (`text/printer.py`, `_Printer._name_eqns`), with the
 * printer's backward walk over the top jaxpr's equations (`_Printer._drop_unused`), the
 * layout's loop over the lines that fit (`pretty.format`) and the layout of a line it built
 * that does not fit (`printer._render_eqn`).
 *
 * The Python code is the reference and the fallback (`text/twin.py` says which one runs).
 * Each function here takes the lines or equations it is sure of and stops at the first one
 * it is not, handing it back to the Python loop, which reads or prints it as it always does;
 * so this module holds no rule of its own but the line's syntax.  Values are never formatted
 * here: parameter texts, literals, types and fresh names come from the Python functions that
 * make them (callbacks), so both paths give the same bytes whatever those functions do.
 * tests/test_twin.py compares the two paths on the corpus, the goldens and generated
 * programs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <marshal.h>

/* set by `configure`: the IR classes and the member descriptors of their slots */
static PyTypeObject *VarType, *EqnType, *LocType;
static PyObject *var_type, *var_hint;
static PyObject *eqn_fields[7]; /* prim inputs outputs params loc bare_eq no_subjaxprs */
/* `core._KIND_OF_TYPE` (a parameter value's type -> how `_collect_jaxprs` looks into it) and
 * its `_LEAF` mark; NULL where `configure` was given none */
static PyObject *kind_of_type, *kind_leaf;
static PyObject *str_eqn_start, *str_eq, *str_colon, *str_space, *str_empty, *str_under;
static PyObject *str_open, *str_close_sp, *str_equals, *str_typed, *str_close, *str_type;

static int set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
    return Py_TYPE(descr)->tp_descr_set(descr, obj, value);
}

static PyObject *get_slot(PyObject *descr, PyObject *obj) {
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* configure(Var, (type, hint descriptors), Eqn, (its 7 slot descriptors), Loc
 *           [, core._KIND_OF_TYPE, core._LEAF]) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *var, *vd, *eqn, *ed, *loc, *kinds = NULL, *leaf = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!|O!O", &PyType_Type, &var, &PyTuple_Type, &vd,
                          &PyType_Type, &eqn, &PyTuple_Type, &ed, &PyType_Type, &loc,
                          &PyDict_Type, &kinds, &leaf))
        return NULL;
    if (PyTuple_GET_SIZE(vd) != 2 || PyTuple_GET_SIZE(ed) != 7) {
        PyErr_SetString(PyExc_TypeError, "configure: 2 Var and 7 Eqn slot descriptors");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 9; i++) {
        PyObject *d = i < 2 ? PyTuple_GET_ITEM(vd, i) : PyTuple_GET_ITEM(ed, i - 2);
        if (Py_TYPE(d)->tp_descr_set == NULL || Py_TYPE(d)->tp_descr_get == NULL) {
            PyErr_SetString(PyExc_TypeError, "configure: not a slot descriptor");
            return NULL;
        }
    }
    Py_XSETREF(VarType, (PyTypeObject *)Py_NewRef(var));
    Py_XSETREF(EqnType, (PyTypeObject *)Py_NewRef(eqn));
    Py_XSETREF(LocType, (PyTypeObject *)Py_NewRef(loc));
    Py_XSETREF(var_type, Py_NewRef(PyTuple_GET_ITEM(vd, 0)));
    Py_XSETREF(var_hint, Py_NewRef(PyTuple_GET_ITEM(vd, 1)));
    for (int i = 0; i < 7; i++) Py_XSETREF(eqn_fields[i], Py_NewRef(PyTuple_GET_ITEM(ed, i)));
    Py_XSETREF(kind_of_type, Py_XNewRef(leaf == NULL ? NULL : kinds));
    Py_XSETREF(kind_leaf, Py_XNewRef(leaf));
    Py_RETURN_NONE;
}

/* Var(t, name), as `Var.__init__` makes it */
static PyObject *new_var(PyObject *t, PyObject *name) {
    PyObject *v = VarType->tp_alloc(VarType, 0);
    if (v == NULL) return NULL;
    if (set_slot(var_type, v, t) < 0 || set_slot(var_hint, v, name) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* Eqn(prim, inputs, outputs, params, loc), as `core._fast_eqn_init` makes it, with
 * `no_subjaxprs` set as `FastPath.read_run` sets it (its parameter lists hold plain values,
 * never a jaxpr); steals none */
static PyObject *new_eqn(PyObject *prim, PyObject *inputs, PyObject *outputs, PyObject *params,
                         PyObject *loc) {
    PyObject *e = EqnType->tp_alloc(EqnType, 0);
    if (e == NULL) return NULL;
    PyObject *vals[7] = {prim, inputs, outputs, params, loc, Py_False, Py_True};
    for (int i = 0; i < 7; i++)
        if (set_slot(eqn_fields[i], e, vals[i]) < 0) {
            Py_DECREF(e);
            return NULL;
        }
    return e;
}

/* ------------------------------------------------------------------ the reader */

typedef struct {
    PyObject *s;
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

#define CH(t, i) ((i) < (t)->n ? PyUnicode_READ((t)->kind, (t)->data, (i)) : (Py_UCS4)0)
#define LOWER(c) ((c) >= 'a' && (c) <= 'z')
#define DIGIT(c) ((c) >= '0' && (c) <= '9')
#define ALPHA(c) (LOWER(c) || ((c) >= 'A' && (c) <= 'Z'))

/* Where `[^\]\n]*\]` from s[i] ends (after its `]`), or -1. */
static Py_ssize_t bracket_end(const Text *t, Py_ssize_t i) {
    for (; i < t->n; i++) {
        Py_UCS4 c = PyUnicode_READ(t->kind, t->data, i);
        if (c == ']') return i + 1;
        if (c == '\n') return -1;
    }
    return -1;
}

/* The parts of the line at s[p] that `fast._plain_line(indent)` matches, found as its
 * regular expression finds them: `([a-z]+_?):(FAST_TYPE) = (PRIM)(\[[^\]\n]*\])?` then
 * `((?: [^ \n]+)*)\n` and the next line's `indent` and `[a-z_]`.  0 where it does not match. */
typedef struct {
    Py_ssize_t start, name_end, type_start, type_end, prim_start, prim_end, params_start, ops_start,
        nl, breaks;
} Line;

/* Where a parameter list whose `[` is at s[j - 1] ends for `FastPath.fast_params` (after the
 * first `]` followed by a blank or a line break), or -1; the line breaks before it. */
static Py_ssize_t list_end(const Text *t, Py_ssize_t j, Py_ssize_t *breaks) {
    *breaks = 0;
    for (; j + 1 < t->n; j++) {
        Py_UCS4 c = PyUnicode_READ(t->kind, t->data, j);
        if (c == '\n') {
            ++*breaks;
        } else if (c == ']') {
            Py_UCS4 d = PyUnicode_READ(t->kind, t->data, j + 1);
            if (d == ' ' || d == '\n') return j + 1;
        }
    }
    return -1;
}

static int match_line(const Text *t, Py_ssize_t p, PyObject *indent, Line *m) {
    Py_ssize_t i = p;
    Py_UCS4 c;
    m->start = p;
    while (LOWER(CH(t, i))) i++;
    if (i == p) return 0;
    if (CH(t, i) == '_') i++;
    if (CH(t, i) != ':') return 0;
    m->name_end = i++;
    /* FAST_TYPE: [a-z][a-z0-9_]*+(?:<[^<>\s]*>)?\[[^\]\n]*\](?!\{) */
    m->type_start = i;
    if (!LOWER(CH(t, i))) return 0;
    for (i++; (c = CH(t, i)), LOWER(c) || DIGIT(c) || c == '_'; i++)
        ;
    if (c == '<') {
        for (i++; i < t->n; i++) {
            c = PyUnicode_READ(t->kind, t->data, i);
            if (c == '<' || c == '>' || Py_UNICODE_ISSPACE(c)) break;
        }
        if (CH(t, i) != '>') return 0;
        i++;
    }
    if (CH(t, i) != '[') return 0;
    i = bracket_end(t, i + 1);
    if (i < 0 || CH(t, i) == '{') return 0;
    m->type_end = i;
    if (CH(t, i) != ' ' || CH(t, i + 1) != '=' || CH(t, i + 2) != ' ') return 0;
    i += 3;
    m->prim_start = i;
    c = CH(t, i);
    if (!(ALPHA(c) || c == '_')) return 0;
    for (i++; (c = CH(t, i)), ALPHA(c) || DIGIT(c) || c == '_' || c == '.' || c == '-'; i++)
        ;
    m->prim_end = i;
    m->params_start = -1;
    m->breaks = 0;
    if (c == '[') {
        m->params_start = i;
        Py_ssize_t e = bracket_end(t, i + 1);
        if (e < 0) {
            /* a list over several lines, as `FastPath.read_run`'s general reading takes it */
            e = list_end(t, i + 1, &m->breaks);
            if (e < 0) return 0;
        }
        i = e;
    }
    m->ops_start = i;
    /* (?: [^ \n]+)* then a line break */
    while (CH(t, i) == ' ') {
        Py_ssize_t k = ++i;
        while (i < t->n && (c = PyUnicode_READ(t->kind, t->data, i)) != ' ' && c != '\n') i++;
        if (i == k) return 0;
    }
    if (CH(t, i) != '\n' || i >= t->n) return 0;
    m->nl = i;
    /* the next line: the block's indentation, then [a-z_] */
    Py_ssize_t w = PyUnicode_GET_LENGTH(indent);
    if (i + 1 + w >= t->n) return 0;
    if (w && PyUnicode_Tailmatch(t->s, indent, i + 1, i + 1 + w, -1) != 1) return 0;
    Py_ssize_t k = i + 1 + w;
    c = PyUnicode_READ(t->kind, t->data, k);
    if (m->breaks && c == 'i' && CH(t, k + 1) == 'n' && CH(t, k + 2) == ' ' && CH(t, k + 3) == '(')
        return 0; /* (the block's `in (` at the equations' column: the general reading's) */
    return LOWER(c) || c == '_';
}

/* What the reader's twin reads with: the text and the parse's state and readers. */
typedef struct {
    Text t;
    PyObject *table, *types, *remembered, *operands, *literal, *error, *param_lists;
} Reader;

/* `FastPath.line_operands(a, b, table)`: the operands s[a:b] read by the readers, or None */
static PyObject *call_operands(const Reader *R, Py_ssize_t a, Py_ssize_t b) {
    PyObject *r = PyObject_CallFunction(R->operands, "nnO", a, b, R->table);
    if (r == Py_None) Py_CLEAR(r);
    return r;
}

/* Where a typed literal `VALUE:TYPE` of the simplest kind (a value `-?[0-9][0-9.]*(e[+-]?[0-9]+)?`,
 * `-?inf` or `nan`, a type `[a-z][a-z0-9_]*[...]`: the grammar's OPERAND reads nothing else
 * from such a token; `G.SIMPLE_LITERAL`, as `FastPath.plain_operands` reads it) has its `:` in
 * s[i:j], or -1.  (`CH` reads its index twice: never `CH(t, ++i)`.) */
static Py_ssize_t simple_literal(const Text *t, Py_ssize_t i, Py_ssize_t j) {
    Py_UCS4 c = CH(t, i);
    if (c == 'n') {
        if (CH(t, i + 1) != 'a' || CH(t, i + 2) != 'n') return -1;
        i += 3;
    } else {
        if (c == '-') {
            i++;
            c = CH(t, i);
        }
        if (c == 'i') {
            if (CH(t, i + 1) != 'n' || CH(t, i + 2) != 'f') return -1;
            i += 3;
        } else {
            if (!DIGIT(c)) return -1;
            for (i++; i < j && ((c = CH(t, i)), DIGIT(c) || c == '.'); i++)
                ;
            if (i < j && c == 'e') {
                i++;
                c = CH(t, i);
                if (c == '+' || c == '-') {
                    i++;
                    c = CH(t, i);
                }
                if (!DIGIT(c)) return -1;
                while (i < j && DIGIT(CH(t, i))) i++;
            }
        }
    }
    Py_ssize_t colon = i;
    if (i >= j || CH(t, i) != ':' || !LOWER(CH(t, i + 1))) return -1;
    for (i += 2; i < j && ((c = CH(t, i)), LOWER(c) || DIGIT(c) || c == '_'); i++)
        ;
    if (i >= j || c != '[') return -1;
    for (i++; i < j && CH(t, i) != ']'; i++)
        ;
    return i + 1 == j ? colon : -1;
}

/* `Readers.typed_literal` of the token s[i:j] whose `:` is at s[colon]; NULL with no error
 * set where the readers refuse it (the Python loop reads the line, and words the error). */
static PyObject *read_literal(const Reader *R, Py_ssize_t i, Py_ssize_t colon, Py_ssize_t j) {
    PyObject *value = PyUnicode_Substring(R->t.s, i, colon), *r = NULL;
    PyObject *type = PyUnicode_Substring(R->t.s, colon + 1, j);
    if (value != NULL && type != NULL)
        r = PyObject_CallFunction(R->literal, "OnOn", value, i, type, colon + 1);
    Py_XDECREF(value);
    Py_XDECREF(type);
    if (r == NULL && PyErr_ExceptionMatches(R->error)) PyErr_Clear();
    return r;
}

/* The operands s[a:b] (` x y 2.0:f32[]`): the variables `table` binds, the simplest typed
 * literals read by the readers (`Readers.typed_literal`), or all of them read by
 * `FastPath.line_operands` where one is anything else (`_`, `a_`, `inf`, an untyped literal,
 * a name not bound); NULL (no error set) where the Python loop reads them otherwise. */
static PyObject *plain_operands(const Reader *R, Py_ssize_t a, Py_ssize_t b) {
    const Text *t = &R->t;
    Py_ssize_t count = 0;
    for (Py_ssize_t i = a; i < b; i++) count += PyUnicode_READ(t->kind, t->data, i) == ' ';
    PyObject *out = PyTuple_New(count);
    if (out == NULL) return NULL;
    Py_ssize_t k = 0, i = a + 1;
    while (i <= b) {
        Py_ssize_t j = i, colon;
        int plain = 1;
        for (; j < b; j++) {
            Py_UCS4 c = PyUnicode_READ(t->kind, t->data, j);
            if (c == ' ') break;
            plain &= c != ':' && c != '_' && c != '(';
        }
        PyObject *v;
        if (plain) {
            PyObject *name = PyUnicode_Substring(t->s, i, j);
            if (name == NULL) goto fail;
            v = Py_XNewRef(PyDict_GetItemWithError(R->table, name));
            Py_DECREF(name);
        } else if ((colon = simple_literal(t, i, j)) >= 0) {
            v = read_literal(R, i, colon, j);
        } else {
            v = NULL;
        }
        if (v == NULL) {
            Py_DECREF(out);
            return PyErr_Occurred() ? NULL : call_operands(R, a, b);
        }
        PyTuple_SET_ITEM(out, k++, v);
        i = j + 1;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* `FastPath.remembered_params(text)`, or NULL (no error set) where no list was read with
 * that text: a copy of the remembered dict, its values with lists inside made afresh from
 * their `marshal` bytes (as `marshal.loads`), or the method's where one has none. */
static PyObject *remembered(const Reader *R, PyObject *text) {
    PyObject *known = PyDict_GetItemWithError(R->param_lists, text), *r;
    if (known == NULL) return NULL;
    if (!(PyTuple_CheckExact(known) && PyTuple_GET_SIZE(known) == 2 &&
          PyDict_CheckExact(PyTuple_GET_ITEM(known, 0)) &&
          PyList_CheckExact(PyTuple_GET_ITEM(known, 1))))
        goto method;
    PyObject *lists = PyTuple_GET_ITEM(known, 1);
    Py_ssize_t n = PyList_GET_SIZE(lists);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(lists, i);
        if (!PyTuple_CheckExact(x) || PyTuple_GET_SIZE(x) != 3 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(x, 1)))
            goto method; /* (a value `marshal` does not keep: the method copies it) */
    }
    r = PyDict_Copy(PyTuple_GET_ITEM(known, 0));
    for (Py_ssize_t i = 0; r != NULL && i < n; i++) {
        PyObject *x = PyList_GET_ITEM(lists, i), *blob = PyTuple_GET_ITEM(x, 1);
        PyObject *v = PyMarshal_ReadObjectFromString(PyBytes_AS_STRING(blob),
                                                     PyBytes_GET_SIZE(blob));
        if (v == NULL || PyDict_SetItem(r, PyTuple_GET_ITEM(x, 0), v) < 0) Py_CLEAR(r);
        Py_XDECREF(v);
    }
    return r;
method:
    r = PyObject_CallOneArg(R->remembered, text);
    if (r == Py_None) Py_CLEAR(r);
    return r;
}

/* One line's equation, its result bound in `table`; NULL with no error set where the Python
 * loop reads the line (a type or parameter list not read yet, operands it reads otherwise). */
static PyObject *line_eqn(const Reader *R, const Line *m, PyObject *loc) {
    const Text *t = &R->t;
    PyObject *name = NULL, *ty, *prm = NULL, *inputs = NULL, *prim = NULL, *out = NULL,
             *outs = NULL, *e = NULL;
    PyObject *key = PyUnicode_Substring(t->s, m->type_start, m->type_end);
    if (key == NULL) return NULL;
    ty = PyDict_GetItemWithError(R->types, key);
    Py_DECREF(key);
    if (ty == NULL) return NULL;
    if (m->params_start < 0) {
        prm = PyDict_New();
    } else {
        key = PyUnicode_Substring(t->s, m->params_start, m->ops_start);
        if (key == NULL) return NULL;
        prm = remembered(R, key);
        Py_DECREF(key);
    }
    if (prm == NULL) return NULL;
    if (m->ops_start == m->nl) {
        inputs = PyTuple_New(0);
    } else {
        inputs = plain_operands(R, m->ops_start, m->nl);
    }
    if (inputs == NULL) goto done;
    prim = PyUnicode_Substring(t->s, m->prim_start, m->prim_end);
    name = PyUnicode_Substring(t->s, m->start, m->name_end);
    if (prim == NULL || name == NULL) goto done;
    PyUnicode_InternInPlace(&prim);
    out = new_var(ty, name);
    if (out == NULL) goto done;
    outs = PyTuple_Pack(1, out);
    if (outs == NULL || PyDict_SetItem(R->table, name, out) < 0) goto done;
    e = new_eqn(prim, inputs, outs, prm, loc);
done:
    Py_XDECREF(name);
    Py_XDECREF(prm);
    Py_XDECREF(inputs);
    Py_XDECREF(prim);
    Py_XDECREF(out);
    Py_XDECREF(outs);
    return e;
}

/* read_lines(st, s, p, line, end, eqcol, indent, table, types, remembered, operands, eqns,
 *            path, literal, error, param_lists)
 *   -> (p, line, end)
 * `FastPath.read_run`'s loop over the commonest equations (`fast._plain_line`): from s[p],
 * the first of a line `line` at the block's column `eqcol` (after `indent`), the equations
 * appended to `eqns` until a line the Python loop reads (or none matches); where the next
 * equation starts, its line, and where the last one read ended (`end`, unchanged if none).
 * `st.eqn_start` is set to the last equation's start. */
static PyObject *read_lines(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 16 || !PyDict_CheckExact(args[15]) || !PyUnicode_Check(args[1]) || !PyUnicode_Check(args[6]) ||
        !PyDict_CheckExact(args[7]) || !PyDict_CheckExact(args[8]) || !PyList_Check(args[11])) {
        PyErr_SetString(PyExc_TypeError, "read_lines: bad arguments");
        return NULL;
    }
    if (VarType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "read_lines: not configured");
        return NULL;
    }
    PyObject *st = args[0], *indent = args[6], *eqns = args[11], *path = args[12];
    Py_ssize_t p = PyLong_AsSsize_t(args[2]), line = PyLong_AsSsize_t(args[3]);
    Py_ssize_t end = PyLong_AsSsize_t(args[4]), eqcol = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) return NULL;
    Reader R = {{args[1], PyUnicode_KIND(args[1]), PyUnicode_DATA(args[1]),
                 PyUnicode_GET_LENGTH(args[1])},
                args[7], args[8], args[9], args[10], args[13], args[14], args[15]};
    PyObject *col = PyLong_FromSsize_t(eqcol);
    if (col == NULL) return NULL;
    Py_ssize_t last = -1;
    Line m;
    while (p >= 0 && match_line(&R.t, p, indent, &m)) {
        PyObject *loc = LocType->tp_alloc(LocType, 3), *ln;
        if (loc == NULL || (ln = PyLong_FromSsize_t(line)) == NULL) {
            Py_XDECREF(loc);
            goto error;
        }
        PyTuple_SET_ITEM(loc, 0, Py_NewRef(path));
        PyTuple_SET_ITEM(loc, 1, ln);
        PyTuple_SET_ITEM(loc, 2, Py_NewRef(col));
        PyObject *e = line_eqn(&R, &m, loc);
        Py_DECREF(loc);
        if (e == NULL) {
            if (PyErr_Occurred()) goto error;
            break; /* the Python loop reads this line */
        }
        int r = PyList_Append(eqns, e);
        Py_DECREF(e);
        if (r < 0) goto error;
        last = p;
        end = m.nl;
        p = end + eqcol;
        line += 1 + m.breaks;
    }
    Py_DECREF(col);
    if (last >= 0) {
        PyObject *at = PyLong_FromSsize_t(last);
        if (at == NULL) return NULL;
        int r = PyObject_SetAttr(st, str_eqn_start, at);
        Py_DECREF(at);
        if (r < 0) return NULL;
    }
    return Py_BuildValue("nnn", p, line, end);
error:
    Py_DECREF(col);
    return NULL;
}

/* ------------------------------------------------------------------ the printer */

/* a + b + c (strings), made at once (NULL on failure) */
static PyObject *concat3(PyObject *a, PyObject *b, PyObject *c) {
    if (!PyUnicode_Check(a) || !PyUnicode_Check(b) || !PyUnicode_Check(c)) {
        PyObject *ab = PyUnicode_Concat(a, b), *r; /* (raises what `+` raises) */
        if (ab == NULL) return NULL;
        r = PyUnicode_Concat(ab, c);
        Py_DECREF(ab);
        return r;
    }
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    Py_ssize_t lc = PyUnicode_GET_LENGTH(c);
    Py_UCS4 most = PyUnicode_MAX_CHAR_VALUE(a);
    if (PyUnicode_MAX_CHAR_VALUE(b) > most) most = PyUnicode_MAX_CHAR_VALUE(b);
    if (PyUnicode_MAX_CHAR_VALUE(c) > most) most = PyUnicode_MAX_CHAR_VALUE(c);
    PyObject *r = PyUnicode_New(la + lb + lc, most);
    if (r == NULL) return NULL;
    if (PyUnicode_CopyCharacters(r, 0, a, 0, la) < 0 ||
        PyUnicode_CopyCharacters(r, la, b, 0, lb) < 0 ||
        PyUnicode_CopyCharacters(r, la + lb, c, 0, lc) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* The printer's state an equation line reads and writes (`_Printer._name_eqns`'s locals). */
typedef struct {
    PyObject *docs, *scope, *watched, *bad, *names, *vids, *ts, *drops, *kinds;
    PyObject *kind_of, *pairs_of, *param_text, *literal, *type_text, *fresh;
    int suffixes, eq_empty;
    PyObject *lazy, *build, *render, *rebound;
    Py_ssize_t fits;  /* a line this wide is kept as its flat text (`_name_eqns`' `fits`) */
    Py_ssize_t total; /* the flat width of the lines built */
    /* `_Printer.fresh`'s state: the printer (its `counter`, read into `counter` here and
     * written back), the names made so far (`_NAMES`) and those shared jaxprs took */
    PyObject *printer, *names_made, *shared_names;
    Py_ssize_t counter;
    /* `_Printer.tree_texts`: the text of a tree of ints by its `marshal` bytes (version 2) */
    PyObject *tree_texts;
} Printer;

static PyObject *str_counter;

/* The printer's `counter` read into P->counter (0), or -1 with an error set. */
static int load_counter(Printer *P) {
    PyObject *c = PyObject_GetAttr(P->printer, str_counter);
    if (c == NULL) return -1;
    P->counter = PyLong_AsSsize_t(c);
    Py_DECREF(c);
    return P->counter < 0 && PyErr_Occurred() ? -1 : 0;
}

/* P->counter written back to the printer's `counter`. */
static int store_counter(Printer *P) {
    PyObject *c = PyLong_FromSsize_t(P->counter);
    if (c == NULL) return -1;
    int r = PyObject_SetAttr(P->printer, str_counter, c);
    Py_DECREF(c);
    return r;
}

/* `_Printer.fresh()`: the next name of the counter among those made (`_NAMES`) where no shared
 * jaxpr took it, else `fresh` itself (it makes more names, or skips a shared jaxpr's);
 * new reference. */
static PyObject *fresh_name(Printer *P) {
    if (P->counter < PyList_GET_SIZE(P->names_made)) {
        PyObject *n = PyList_GET_ITEM(P->names_made, P->counter);
        int taken = PySet_Contains(P->shared_names, n);
        if (taken < 0) return NULL;
        if (!taken) {
            P->counter++;
            return Py_NewRef(n);
        }
    }
    if (store_counter(P) < 0) return NULL;
    PyObject *n = PyObject_CallNoArgs(P->fresh);
    if (n == NULL) return NULL;
    if (load_counter(P) < 0) {
        Py_DECREF(n);
        return NULL;
    }
    return n;
}

/* `_Printer._param_text(v)` where it finds the text of a list or a non-empty tuple among
 * those `_tree_text` made (`tree_texts`, by the value's marshal bytes), kept by the value's
 * id (`vids`) as it keeps it; a borrowed reference, or NULL with no error set where the
 * Python function is to be asked (a value marshal does not write, or one not seen yet). */
static PyObject *tree_text(Printer *P, PyObject *v, PyObject *id) {
    if (!PyList_CheckExact(v) && !(PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) > 0))
        return NULL;
    PyObject *key = PyMarshal_WriteObjectToString(v, 2);
    if (key == NULL) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) PyErr_Clear(); /* (`_tree_text`'s) */
        return NULL;
    }
    PyObject *t = PyDict_GetItemWithError(P->tree_texts, key);
    Py_DECREF(key);
    if (t == NULL || !PyUnicode_CheckExact(t)) return NULL;
    return PyDict_SetItem(P->vids, id, t) < 0 ? NULL : t;
}

/* The parameter texts `k=v` of `e` (`pairs`: its printed pairs), or NULL with no error set
 * where a value is a jaxpr (the Python loop prints that equation). */
static PyObject *param_texts(Printer *P, PyObject *pairs) {
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    PyObject *kvs = PyList_New(n);
    if (kvs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *kv = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            PyErr_SetString(PyExc_TypeError, "a parameter pair is not (key, value)");
            goto fail;
        }
        PyObject *v = PyTuple_GET_ITEM(kv, 1);
        PyObject *id = PyLong_FromVoidPtr(v);
        if (id == NULL) goto fail;
        PyObject *t = PyDict_GetItemWithError(P->vids, id);
        if (t == NULL && !PyErr_Occurred()) t = tree_text(P, v, id);
        Py_DECREF(id);
        if (t != NULL) {
            Py_INCREF(t);
        } else {
            if (PyErr_Occurred()) goto fail;
            t = PyObject_CallOneArg(P->param_text, v);
            if (t == NULL) goto fail;
            if (t == Py_None) {
                Py_DECREF(t);
                goto fail;
            }
        }
        PyObject *s = concat3(PyTuple_GET_ITEM(kv, 0), str_equals, t);
        Py_DECREF(t);
        if (s == NULL) goto fail;
        PyList_SET_ITEM(kvs, i, s);
    }
    return kvs;
fail:
    Py_DECREF(kvs);
    return NULL;
}

/* The texts of an equation's operands, and the uses the reader would read as another
 * binding (`shadowed`); NULL with no error set where an operand has no name yet. */
static PyObject *operand_texts(Printer *P, PyObject *inputs, PyObject *shadowed,
                               int *untyped) {
    Py_ssize_t n = PyTuple_GET_SIZE(inputs);
    PyObject *ins = PyList_New(n);
    if (ins == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(inputs, i), *s;
        if (Py_TYPE(a) == VarType) {
            s = PyDict_GetItemWithError(P->names, a);
            if (s == NULL) goto fail; /* (a use not named yet: the Python loop names it) */
            Py_INCREF(s);
            PyObject *at = PyDict_GetItemWithError(P->scope, s);
            int other = at != a;
            if (!other && PyUnicode_Compare(s, str_under) == 0) {
                other = PyDict_Contains(P->scope, P->rebound);
            }
            int r = other > 0 ? PySet_Contains(P->watched, a) : other;
            if (r > 0) r = PyList_Append(shadowed, a);
            if (r < 0 || PyErr_Occurred()) {
                Py_DECREF(s);
                goto fail;
            }
        } else {
            s = PyObject_CallOneArg(P->literal, a);
            if (s == NULL) goto fail;
            PyObject *typed = PyObject_GetAttr(a, str_typed);
            if (typed == NULL) {
                Py_DECREF(s);
                goto fail;
            }
            int r = PyObject_IsTrue(typed);
            Py_DECREF(typed);
            if (r < 0) {
                Py_DECREF(s);
                goto fail;
            }
            *untyped |= !r;
        }
        PyList_SET_ITEM(ins, i, s);
    }
    return ins;
fail:
    Py_DECREF(ins);
    return NULL;
}

/* The name of a result binder (a fresh one where it has none yet, as `_name_binders`
 * gives it), bound in the scope; new reference. */
static PyObject *result_name(Printer *P, PyObject *v) {
    PyObject *n = PyDict_GetItemWithError(P->names, v);
    if (n != NULL) return Py_NewRef(n);
    if (PyErr_Occurred()) return NULL;
    int dropped = PySet_Contains(P->drops, v);
    if (dropped < 0) return NULL;
    if (dropped) {
        n = Py_NewRef(str_under);
    } else {
        n = fresh_name(P);
        if (n == NULL) return NULL;
        if (P->suffixes) {
            PyObject *h = get_slot(var_hint, v);
            if (h == NULL) {
                Py_DECREF(n);
                return NULL;
            }
            Py_ssize_t w = PyUnicode_Check(h) ? PyUnicode_GET_LENGTH(h) : 0;
            if (w > 1 && PyUnicode_READ_CHAR(h, w - 1) == '_') {
                Py_SETREF(n, PyUnicode_Concat(n, str_under)); /* as `_name_binders` */
            }
            Py_DECREF(h);
            if (n == NULL) return NULL;
        }
    }
    if (PyDict_SetItem(P->names, v, n) < 0) {
        Py_DECREF(n);
        return NULL;
    }
    return n;
}

/* `printer._bind`: `v` bound to its name in the scope, `watched` given each
 * binder of `_` and each binder whose name is bound again; -1 on error. */
static int bind(Printer *P, PyObject *name, PyObject *v) {
    if (PyUnicode_Compare(name, str_under) == 0) {
        int r = PyDict_Contains(P->scope, name);
        if (r < 0 || (r && PyDict_SetItem(P->scope, P->rebound, v) < 0)) return -1;
        if (PyDict_SetItem(P->scope, name, v) < 0) return -1;
        return PySet_Add(P->watched, v);
    }
    PyObject *old = PyDict_SetDefault(P->scope, name, v); /* borrowed */
    if (old == NULL) return -1;
    if (old == v) return 0;
    if (PySet_Add(P->watched, old) < 0) return -1; /* (the set holds it from here on) */
    return PyDict_SetItem(P->scope, name, v);
}

/* The texts of an equation's binders `name:TYPE`, its results named and bound. */
static PyObject *binder_texts(Printer *P, PyObject *outputs) {
    Py_ssize_t n = PyTuple_GET_SIZE(outputs);
    PyObject *outs = PyList_New(n);
    if (outs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(outputs, i);
        PyObject *name = NULL, *ty = NULL, *tid = NULL, *tt;
        PyObject *s = NULL;
        name = result_name(P, v);
        if (name == NULL) goto next;
        if (bind(P, name, v) < 0) goto next;
        ty = get_slot(var_type, v);
        if (ty == NULL || (tid = PyLong_FromVoidPtr(ty)) == NULL) goto next;
        tt = PyDict_GetItemWithError(P->ts, tid);
        if (tt != NULL && PyObject_IsTrue(tt) == 1) {
            Py_INCREF(tt);
        } else {
            if (PyErr_Occurred()) goto next;
            tt = PyObject_CallOneArg(P->type_text, ty);
            if (tt == NULL) goto next;
        }
        s = concat3(name, str_colon, tt);
        Py_DECREF(tt);
    next:
        Py_XDECREF(name);
        Py_XDECREF(ty);
        Py_XDECREF(tid);
        if (s == NULL) goto fail;
        PyList_SET_ITEM(outs, i, s);
    }
    return outs;
fail:
    Py_DECREF(outs);
    return NULL;
}

/* Append `items` to `parts`, `sep` between them. */
static int append_joined(PyObject *parts, PyObject *items, PyObject *sep) {
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((i && PyList_Append(parts, sep) < 0) ||
            PyList_Append(parts, PyList_GET_ITEM(items, i)) < 0)
            return -1;
    }
    return 0;
}

/* The flat text of an equation line (`_name_eqns`' f-strings), joined once. */
static PyObject *flat_line(PyObject *name, PyObject *kvs, PyObject *ins, PyObject *outs,
                           int eq) {
    PyObject *parts = PyList_New(0), *r = NULL;
    if (parts == NULL) return NULL;
    if (eq && (append_joined(parts, outs, str_space) < 0 || PyList_Append(parts, str_eq) < 0))
        goto done;
    if (PyList_Append(parts, name) < 0) goto done;
    if (PyList_GET_SIZE(kvs)) {
        if (PyList_Append(parts, str_open) < 0 || append_joined(parts, kvs, str_space) < 0 ||
            PyList_Append(parts, str_close_sp) < 0)
            goto done;
    } else if (PyList_Append(parts, str_space) < 0) {
        goto done;
    }
    if (append_joined(parts, ins, str_space) < 0) goto done;
    r = PyUnicode_Join(str_empty, parts);
done:
    Py_DECREF(parts);
    return r;
}

/* The line document of an ordinary equation, its names given and its scope read as the
 * Python loop does; NULL with no error set where the Python loop prints it. */
static PyObject *eqn_line(Printer *P, PyObject *e, PyObject *shadowed, int *untyped) {
    PyObject *prim = NULL, *kind, *params = NULL, *pairs = NULL, *kvs = NULL, *inputs = NULL;
    PyObject *ins = NULL, *outputs = NULL, *outs = NULL, *flat = NULL, *args = NULL;
    PyObject *line = NULL, *width = NULL;
    if (Py_TYPE(e) != EqnType) return NULL;
    prim = get_slot(eqn_fields[0], e);
    if (prim == NULL) return NULL;
    kind = PyDict_GetItemWithError(P->kinds, prim);
    if (kind == NULL) {
        if (PyErr_Occurred()) goto done;
        kind = PyObject_CallOneArg(P->kind_of, prim);
        if (kind == NULL) goto done;
        int r = PyDict_SetItem(P->kinds, prim, kind);
        Py_DECREF(kind);
        if (r < 0) goto done;
    }
    long how = PyLong_AsLong(kind); /* 0: the Python loop's; 1: sorted params; 2: pairs_of */
    if (how <= 0) goto done;
    params = get_slot(eqn_fields[3], e);
    if (params == NULL || !PyDict_Check(params)) goto done;
    if (PyDict_GET_SIZE(params) == 0) {
        pairs = PyList_New(0);
    } else if (how == 1) {
        pairs = PyDict_Items(params);
        if (pairs != NULL && PyList_Sort(pairs) < 0) Py_CLEAR(pairs);
    } else {
        pairs = PyObject_CallOneArg(P->pairs_of, e);
        if (pairs != NULL && !PyList_Check(pairs)) {
            PyErr_SetString(PyExc_TypeError, "printed parameters are not a list");
            Py_CLEAR(pairs);
        }
    }
    if (pairs == NULL || (kvs = param_texts(P, pairs)) == NULL) goto done;
    inputs = get_slot(eqn_fields[1], e);
    outputs = get_slot(eqn_fields[2], e);
    if (inputs == NULL || outputs == NULL || !PyTuple_Check(inputs) || !PyTuple_Check(outputs))
        goto done;
    Py_ssize_t nbad = PyList_GET_SIZE(shadowed);
    int lit_untyped = 0;
    ins = operand_texts(P, inputs, shadowed, &lit_untyped);
    if (ins == NULL) {
        PyList_SetSlice(shadowed, nbad, PyList_GET_SIZE(shadowed), NULL);
        goto done;
    }
    /* from here on the equation is this loop's: its results are named and bound */
    *untyped |= lit_untyped;
    outs = binder_texts(P, outputs);
    if (outs == NULL) goto done;
    int eq = PyTuple_GET_SIZE(outputs) > 0 || P->eq_empty;
    flat = flat_line(prim, kvs, ins, outs, eq);
    if (flat == NULL) goto done;
    Py_ssize_t w;
    if (PyUnicode_IS_ASCII(flat)) {
        w = PyUnicode_GET_LENGTH(flat);
    } else {
        PyObject *b = PyUnicode_AsUTF8String(flat);
        if (b == NULL) goto done;
        w = PyBytes_GET_SIZE(b);
        Py_DECREF(b);
    }
    P->total += w;
    if (w <= P->fits) {
        line = Py_NewRef(flat); /* (its document is built only where it does not fit) */
        goto done;
    }
    args = PyTuple_Pack(5, prim, kvs, ins, outs, eq ? Py_True : Py_False);
    if (args == NULL || (width = PyLong_FromSsize_t(w)) == NULL) goto done;
    line = PyTuple_Pack(6, P->lazy, flat, P->build, args, P->render, width);
done:
    Py_XDECREF(prim);
    Py_XDECREF(params);
    Py_XDECREF(pairs);
    Py_XDECREF(kvs);
    Py_XDECREF(inputs);
    Py_XDECREF(ins);
    Py_XDECREF(outputs);
    Py_XDECREF(outs);
    Py_XDECREF(flat);
    Py_XDECREF(args);
    Py_XDECREF(width);
    return line;
}

/* name_var_lines(eqns, k, docs, scope, watched, bad, names, vids, ts, drops, kinds, kind_of,
 *            pairs_of, param_text, literal, type_text, fresh, suffixes, eq_empty,
 *            (LAZY, build, render, REBOUND), fits, printer, _NAMES, shared_names, tree_texts)
 *   -> (k, untyped, width)
 * `_Printer._name_eqns`' loop over ordinary equations: from eqns[k] on, each equation's line
 * document (its flat text alone where it is at most `fits` wide) appended to `docs`, its
 * names given and its scope read, until one the Python loop prints; the index of that one
 * (len(eqns) at the end), whether an untyped literal was printed, and the lines' flat
 * width. */
static PyObject *name_var_lines(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 25 || !PyList_CheckExact(args[22]) || !PyAnySet_Check(args[23]) ||
        !PyDict_CheckExact(args[24]) ||
        !PyTuple_Check(args[0]) || !PyList_Check(args[2]) ||
        !PyDict_CheckExact(args[3]) || !PySet_Check(args[4]) || !PyList_Check(args[5]) ||
        !PyDict_CheckExact(args[6]) || !PyDict_CheckExact(args[7]) ||
        !PyDict_CheckExact(args[8]) || !PyAnySet_Check(args[9]) ||
        !PyDict_CheckExact(args[10]) || !PyTuple_Check(args[19]) ||
        PyTuple_GET_SIZE(args[19]) != 4) {
        PyErr_SetString(PyExc_TypeError, "name_var_lines: bad arguments");
        return NULL;
    }
    if (VarType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "name_var_lines: not configured");
        return NULL;
    }
    PyObject *eqns = args[0], *head = args[19];
    Printer P = {args[2],  args[3],  args[4],  args[5],  args[6],  args[7],  args[8],
                 args[9],  args[10], args[11], args[12], args[13], args[14], args[15],
                 args[16], PyObject_IsTrue(args[17]), PyObject_IsTrue(args[18]),
                 PyTuple_GET_ITEM(head, 0), PyTuple_GET_ITEM(head, 1),
                 PyTuple_GET_ITEM(head, 2), PyTuple_GET_ITEM(head, 3),
                 PyLong_AsSsize_t(args[20]), 0, args[21], args[22], args[23], 0, args[24]};
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k < 0 || P.suffixes < 0 || P.eq_empty < 0 || PyErr_Occurred()) return NULL;
    if (load_counter(&P) < 0) return NULL;
    int untyped = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(eqns);
    for (; k < n; k++) {
        PyObject *line = eqn_line(&P, PyTuple_GET_ITEM(eqns, k), P.bad, &untyped);
        if (line == NULL) {
            if (PyErr_Occurred()) goto error;
            break;
        }
        int r = PyList_Append(P.docs, line);
        Py_DECREF(line);
        if (r < 0) goto error;
    }
    if (store_counter(&P) < 0) return NULL;
    return Py_BuildValue("nOn", k, untyped ? Py_True : Py_False, P.total);
error:
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (store_counter(&P) < 0) PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return NULL;
}

/* drop_unread_vars(eqns, used, names, cand, with_params) -> None
 * `_Printer._drop_unused`'s loop: backwards over `eqns` (the top jaxpr's), each result that
 * no later equation reads (not in `used`, a set of atoms) named `_` in `names`,
 * each result whose hint is `_` appended to `cand`, the Var operands added to `used`, each
 * equation with parameters appended to `with_params` (in that backward order). */
static PyObject *drop_unread_vars(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyTuple_Check(args[0]) || !PySet_Check(args[1]) ||
        !PyDict_CheckExact(args[2]) || !PyList_Check(args[3]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "drop_unread_vars: bad arguments");
        return NULL;
    }
    if (EqnType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "drop_unread_vars: not configured");
        return NULL;
    }
    PyObject *eqns = args[0], *used = args[1], *names = args[2], *cand = args[3];
    PyObject *with_params = args[4];
    for (Py_ssize_t k = PyTuple_GET_SIZE(eqns) - 1; k >= 0; k--) {
        PyObject *e = PyTuple_GET_ITEM(eqns, k);
        if (Py_TYPE(e) != EqnType) {
            PyErr_SetString(PyExc_TypeError, "drop_unread_vars: not an equation");
            return NULL;
        }
        int ok = 0;
        PyObject *outs = get_slot(eqn_fields[2], e), *ins = NULL, *params = NULL;
        PyObject *outs_seq = NULL, *ins_seq = NULL;
        if (outs == NULL || (outs_seq = PySequence_Fast(outs, "outputs")) == NULL) goto next;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(outs_seq); i++) {
            PyObject *v = PySequence_Fast_ITEMS(outs_seq)[i], *hint;
            int r = PySet_Contains(used, v);
            if (r == 0) r = PyDict_SetItem(names, v, str_under);
            if (r < 0 || (hint = get_slot(var_hint, v)) == NULL) goto next;
            r = PyUnicode_Check(hint) ? PyUnicode_Compare(hint, str_under) : 1;
            Py_DECREF(hint);
            if ((r == -1 && PyErr_Occurred()) || (r == 0 && PyList_Append(cand, v) < 0))
                goto next;
        }
        if ((ins = get_slot(eqn_fields[1], e)) == NULL ||
            (ins_seq = PySequence_Fast(ins, "inputs")) == NULL)
            goto next;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ins_seq); i++) {
            /* (a literal is left out, where the Python loop adds it: only results are looked
             * up in `used`, and a literal's hash is a call into Python) */
            PyObject *a = PySequence_Fast_ITEMS(ins_seq)[i];
            if (Py_TYPE(a) == VarType && PySet_Add(used, a) < 0) goto next;
        }
        if ((params = get_slot(eqn_fields[3], e)) == NULL) goto next;
        int has = PyObject_IsTrue(params);
        if (has < 0 || (has && PyList_Append(with_params, e) < 0)) goto next;
        ok = 1;
    next:
        Py_XDECREF(outs);
        Py_XDECREF(outs_seq);
        Py_XDECREF(ins);
        Py_XDECREF(ins_seq);
        Py_XDECREF(params);
        if (!ok) return NULL;
    }
    Py_RETURN_NONE;
}

/* lay_lines_until(out, items, i, nl, room, stop) -> (i, width)
 * `pretty.format`'s loop over the items of LINES in break mode, from items[i] (i > 0) on,
 * before items[stop]: while an item is a string at most `room` wide (its UTF-8 bytes: it
 * fits after the line break), the break `nl` and the item appended to `out`; where it
 * stopped, and the width of the last item laid out (-1 if none). */
static PyObject *lay_lines_until(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyUnicode_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "lay_lines_until: bad arguments");
        return NULL;
    }
    PyObject *out = args[0], *items = args[1], *nl = args[3];
    Py_ssize_t i = PyLong_AsSsize_t(args[2]), room = PyLong_AsSsize_t(args[4]), last = -1;
    Py_ssize_t stop = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) return NULL;
    for (; i > 0 && i < stop && i < PyList_GET_SIZE(items); i++) {
        PyObject *x = PyList_GET_ITEM(items, i);
        if (!PyUnicode_CheckExact(x)) break;
        Py_ssize_t w;
        if (PyUnicode_IS_ASCII(x)) {
            w = PyUnicode_GET_LENGTH(x);
        } else {
            Py_ssize_t size;
            if (PyUnicode_AsUTF8AndSize(x, &size) == NULL) return NULL;
            w = size;
        }
        if (w > room) break;
        if (PyList_Append(out, nl) < 0 || PyList_Append(out, x) < 0) return NULL;
        last = w;
    }
    return Py_BuildValue("nn", i, last);
}

/* The width of a text as the layout counts it (its UTF-8 bytes), or -1 with an error set. */
static Py_ssize_t text_width(PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "render_eqn: a text is not a string");
        return -1;
    }
    if (PyUnicode_IS_ASCII(s)) return PyUnicode_GET_LENGTH(s);
    Py_ssize_t size;
    return PyUnicode_AsUTF8AndSize(s, &size) == NULL ? -1 : size;
}

/* `s` followed by `n` spaces, or `s` alone for n <= 0; new reference. */
static PyObject *with_spaces(const char *s, Py_ssize_t n) {
    size_t ls = strlen(s);
    if (n < 0) n = 0;
    PyObject *r = PyUnicode_New((Py_ssize_t)ls + n, 127);
    if (r == NULL) return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(r);
    memcpy(d, s, ls);
    memset(d + ls, ' ', (size_t)n);
    return r;
}

/* `items` (strings, space-separated) appended to `out` from column *k: joined where they
 * fit in the `width - *k` columns left, else as `pretty.fill_broken(out, k, indent, width,
 * items, "")` lays them out (its empty separators left out: the same text); -1 on error. */
static int put_fill(PyObject *out, Py_ssize_t *k, Py_ssize_t indent, Py_ssize_t width,
                    PyObject *items) {
    Py_ssize_t n = PyList_GET_SIZE(items), total = n ? n - 1 : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t w = text_width(PyList_GET_ITEM(items, i));
        if (w < 0) return -1;
        total += w;
    }
    if (total <= width - *k) { /* the flat text: the items and single spaces */
        for (Py_ssize_t i = 0; i < n; i++) {
            if ((i && PyList_Append(out, str_space) < 0) ||
                PyList_Append(out, PyList_GET_ITEM(items, i)) < 0)
                return -1;
        }
        *k += total;
        return 0;
    }
    PyObject *nl = with_spaces("\n", indent + 2);
    if (nl == NULL) return -1;
    int r = 0;
    for (Py_ssize_t i = 0; i < n && r == 0; i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        if (i) {
            if (*k < width) { /* group(brk()) fits iff 1 <= width - k */
                r = PyList_Append(out, str_space);
                *k += 1;
            } else {
                r = PyList_Append(out, nl);
                *k = indent + 2;
            }
        }
        if (r == 0) r = PyList_Append(out, it);
        *k += text_width(it); /* (measured above: no error) */
    }
    Py_DECREF(nl);
    return r;
}

/* render_eqn(out, k, indent, width, name, kvs, ins, outs, eq) -> k
 * `printer._render_eqn`: the full form of an equation line that does not fit, laid out in
 * break mode at `indent` from column `k`, appended to `out` (in other pieces: the same
 * text); the new column. */
static PyObject *render_eqn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_CheckExact(args[0]) || !PyUnicode_Check(args[4]) ||
        !PyList_Check(args[5]) || !PyList_Check(args[6]) || !PyList_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "render_eqn: bad arguments");
        return NULL;
    }
    PyObject *out = args[0], *name = args[4], *kvs = args[5], *ins = args[6], *outs = args[7];
    Py_ssize_t k = PyLong_AsSsize_t(args[1]), indent = PyLong_AsSsize_t(args[2]);
    Py_ssize_t width = PyLong_AsSsize_t(args[3]);
    int eq = PyObject_IsTrue(args[8]);
    if (eq < 0 || PyErr_Occurred()) return NULL;
    if (eq && PyList_GET_SIZE(outs) && put_fill(out, &k, indent, width, outs) < 0) return NULL;
    if (eq) {
        if (PyList_Append(out, str_eq) < 0) return NULL;
        k += 3;
    }
    Py_ssize_t w = text_width(name);
    if (w < 0 || PyList_Append(out, name) < 0) return NULL;
    k += w;
    Py_ssize_t n = PyList_GET_SIZE(kvs);
    if (n) { /* _kv_doc: a group, `[k=v ...]` flat, else one pair a line and `]` back */
        Py_ssize_t flat = n + 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if ((w = text_width(PyList_GET_ITEM(kvs, i))) < 0) return NULL;
            flat += w;
        }
        if (flat <= width - k) {
            if (PyList_Append(out, str_open) < 0) return NULL;
            for (Py_ssize_t i = 0; i < n; i++) {
                if ((i && PyList_Append(out, str_space) < 0) ||
                    PyList_Append(out, PyList_GET_ITEM(kvs, i)) < 0)
                    return NULL;
            }
            if (PyList_Append(out, str_close) < 0) return NULL;
            k += flat;
        } else {
            PyObject *nl = with_spaces("\n", indent + 2), *end = NULL;
            if (nl == NULL || PyList_Append(out, str_open) < 0) goto kv_fail;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *x = PyList_GET_ITEM(kvs, i);
                if (PyList_Append(out, nl) < 0 || PyList_Append(out, x) < 0) goto kv_fail;
            }
            if ((end = with_spaces("\n", indent)) == NULL || PyList_Append(out, end) < 0 ||
                PyList_Append(out, str_close) < 0)
                goto kv_fail;
            Py_DECREF(nl);
            Py_DECREF(end);
            k = indent + 1;
            goto kv_done;
        kv_fail:
            Py_XDECREF(nl);
            Py_XDECREF(end);
            return NULL;
        }
    }
kv_done:
    if (PyList_Append(out, str_space) < 0) return NULL;
    k += 1;
    if (PyList_GET_SIZE(ins) && put_fill(out, &k, indent, width, ins) < 0) return NULL;
    return PyLong_FromSsize_t(k);
}

/* ------------------------------------------------------------------ the AD builder */

/* the result types `Builder.bind` takes from its memo (`_remembered_types`) for `inputs` (a
 * tuple of Vars and Literals), as a new reference; NULL without an exception where the
 * Python lines must work them out (a miss, an unhashable key, mesh axis sizes in force) */
static PyObject *remembered_types(PyObject *prim, PyObject *inputs, PyObject *params_key,
                                  PyObject *memo, PyObject *axis_sizes_key) {
    Py_ssize_t n = PyTuple_GET_SIZE(inputs);
    PyObject *key = PyTuple_New(n + 2), *res = NULL;
    if (key == NULL) return NULL;
    PyTuple_SET_ITEM(key, 0, Py_NewRef(prim));
    PyTuple_SET_ITEM(key, 1, Py_NewRef(params_key));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyObject_GetAttr(PyTuple_GET_ITEM(inputs, i), str_type);
        if (t == NULL) goto done;
        PyObject *id = PyLong_FromVoidPtr(t);
        Py_DECREF(t);
        if (id == NULL) goto done;
        PyTuple_SET_ITEM(key, i + 2, id);
    }
    PyObject *hit = PyDict_GetItemWithError(memo, key); /* borrowed */
    if (hit == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) PyErr_Clear(); /* an unhashable key */
        goto done;
    }
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2) goto done;
    Py_INCREF(hit);
    /* (the context variable itself is read without a call into Python; a function is called) */
    PyObject *axes = NULL;
    if (PyContextVar_CheckExact(axis_sizes_key)) {
        if (PyContextVar_Get(axis_sizes_key, NULL, &axes) == 0 && axes == NULL)
            PyErr_SetString(PyExc_LookupError, "axis_sizes_key: no value and no default");
    } else {
        axes = PyObject_CallNoArgs(axis_sizes_key);
    }
    if (axes != NULL) {
        int in_force = PyObject_IsTrue(axes);
        Py_DECREF(axes);
        if (in_force == 0) res = Py_NewRef(PyTuple_GET_ITEM(hit, 1));
    }
    Py_DECREF(hit);
done:
    Py_DECREF(key);
    return res;
}

/* bind_fast_vars(prim, inputs, params, out_types, params_key, loc, primal_eqns, tangent_eqns,
 * tangent_vars, force_tangent, memo, axis_sizes_key, Literal): `Builder.bind`'s lines, step
 * for step (`axis_sizes_key` the function, or its context variable `shardings.AXIS_SIZES_KEY`), where every operand is a Var or a Literal and the result types are given or
 * remembered: a Var (hint None) per result type, Eqn(prim, inputs, tuple(outs), params
 * copied, loc) as `core._fast_eqn_init` makes it, appended to `primal_eqns`, or (a split
 * builder: `tangent_eqns` not None) to `tangent_eqns` when `force_tangent` or an operand
 * that is a Var is in `tangent_vars` (a set of the Vars themselves, which gains its
 * results); returns the results, or None where the Python lines must run (another
 * operand, types to infer) */
static PyObject *bind_fast_vars(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13 || !PyList_CheckExact(args[6]) || !PyAnySet_Check(args[8]) ||
        !PyDict_CheckExact(args[10]) || !PyType_Check(args[12]) || EqnType == NULL ||
        VarType == NULL) {
        PyErr_SetString(PyExc_TypeError, "bind_fast_vars: bad arguments");
        return NULL;
    }
    if (!PyDict_CheckExact(args[2])) Py_RETURN_NONE; /* (parameters in another mapping) */
    PyObject *prim = args[0], *params = args[2], *out_types = args[3], *tangents = args[7];
    PyTypeObject *literal = (PyTypeObject *)args[12];
    PyObject *inputs = PySequence_Tuple(args[1]);
    if (inputs == NULL) return NULL;
    PyObject *types = NULL, *outs = NULL, *outt = NULL, *e = NULL, *res = NULL;
    Py_ssize_t n_in = PyTuple_GET_SIZE(inputs);
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyTypeObject *cls = Py_TYPE(PyTuple_GET_ITEM(inputs, i));
        if (cls != VarType && cls != literal) goto python; /* (the Python lines say why) */
    }
    if (out_types == Py_None) {
        if (PyDict_GET_SIZE(params) && args[4] == Py_None) goto python;
        types = remembered_types(prim, inputs, args[4], args[10], args[11]);
        if (types == NULL) goto fail_or_python;
    } else {
        types = Py_NewRef(out_types);
    }
    PyObject *seq = PySequence_Fast(types, "bind_fast_vars: result types are not a sequence");
    Py_SETREF(types, seq);
    if (types == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(types);
    outs = PyList_New(n);
    outt = PyTuple_New(n);
    if (outs == NULL || outt == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = new_var(PySequence_Fast_GET_ITEM(types, i), Py_None);
        if (v == NULL) goto done;
        PyList_SET_ITEM(outs, i, v);
        PyTuple_SET_ITEM(outt, i, Py_NewRef(v));
    }
    PyObject *own = PyDict_GET_SIZE(params) ? PyDict_Copy(params) : PyDict_New();
    if (own == NULL) goto done;
    e = EqnType->tp_alloc(EqnType, 0);
    if (e == NULL) {
        Py_DECREF(own);
        goto done;
    }
    PyObject *no_subjaxprs = PyDict_GET_SIZE(own) == 0 ? Py_True : Py_False;
    PyObject *vals[7] = {prim, inputs, outt, own, args[5], Py_False, no_subjaxprs};
    int bad = 0;
    for (int i = 0; i < 7 && !bad; i++) bad = set_slot(eqn_fields[i], e, vals[i]) < 0;
    Py_DECREF(own);
    if (bad) goto done;
    PyObject *into = args[6];
    if (tangents != Py_None) {
        int tangent = PyObject_IsTrue(args[9]);
        for (Py_ssize_t i = 0; i < n_in && tangent == 0; i++) {
            PyObject *x = PyTuple_GET_ITEM(inputs, i);
            if (Py_TYPE(x) == VarType) tangent = PySet_Contains(args[8], x); /* (Vars only) */
        }
        if (tangent < 0) goto done;
        if (tangent) {
            into = tangents;
            for (Py_ssize_t i = 0; i < n; i++)
                if (PySet_Add(args[8], PyList_GET_ITEM(outs, i)) < 0) goto done;
        }
    }
    if (PyList_Append(into, e) < 0) goto done;
    res = Py_NewRef(outs);
    goto done;
fail_or_python:
    if (PyErr_Occurred()) goto done;
python:
    res = Py_NewRef(Py_None);
done:
    Py_DECREF(inputs);
    Py_XDECREF(types);
    Py_XDECREF(outs);
    Py_XDECREF(outt);
    Py_XDECREF(e);
    return res;
}

/* an equation's operands (field 1) or results (field 2), as a sequence PySequence_Fast reads
 * (a new reference) */
static PyObject *atoms_of(PyObject *e, int field) {
    PyObject *v = get_slot(eqn_fields[field], e);
    if (v == NULL) return NULL;
    PyObject *seq = PySequence_Fast(v, "dce_walk_vars: operands or results not a sequence");
    Py_DECREF(v);
    return seq;
}

/* whether the equation `e` (its results `outs`, a tuple or list) stays in a backward DCE
 * sweep: a result in `live`, or `effects(e)` true.  1, 0, or -1 with an exception set */
static int eqn_alive(PyObject *e, PyObject *outs, PyObject *live, PyObject *effects) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(outs); i++) {
        int alive = PySet_Contains(live, PySequence_Fast_GET_ITEM(outs, i));
        if (alive) return alive;
    }
    PyObject *r = PyObject_CallOneArg(effects, e);
    if (r == NULL) return -1;
    int alive = PyObject_IsTrue(r);
    Py_DECREF(r);
    return alive;
}

/* dce_walk_vars(eqns, live, kept, has_live_effects, prune): `builder.dce_eqns`' backward loop,
 * step for step: each equation of `eqns`, last first, is kept when one of its results is in
 * `live` (a set of the atoms themselves) or else when `has_live_effects(e)`; a kept one is
 * replaced by `prune(e)` when `prune` is not None and its bodies are not known absent
 * (`no_subjaxprs`), appended to `kept` and its operands that are Vars added to `live` (a
 * literal is no result: never looked up; an equal one's Python `__eq__` is not called) */
static PyObject *dce_walk_vars(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PySet_CheckExact(args[1]) || !PyList_CheckExact(args[2]) ||
        EqnType == NULL) {
        PyErr_SetString(PyExc_TypeError, "dce_walk_vars: bad arguments");
        return NULL;
    }
    PyObject *live = args[1], *kept = args[2], *effects = args[3], *prune = args[4];
    PyObject *eqns = PySequence_Fast(args[0], "dce_walk_vars: eqns is not a sequence");
    if (eqns == NULL) return NULL;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(eqns) - 1; i >= 0; i--) {
        PyObject *e = PySequence_Fast_GET_ITEM(eqns, i);
        if (Py_TYPE(e) != EqnType) {
            PyErr_SetString(PyExc_TypeError, "dce_walk_vars: not an Eqn");
            goto fail;
        }
        PyObject *outs = atoms_of(e, 2);
        if (outs == NULL) goto fail;
        int alive = eqn_alive(e, outs, live, effects);
        Py_DECREF(outs);
        if (alive < 0) goto fail;
        if (!alive) continue;
        PyObject *ke = Py_NewRef(e);
        if (prune != Py_None) {
            PyObject *none_inside = get_slot(eqn_fields[6], e);
            if (none_inside == NULL) goto fail_ke;
            int known = none_inside == Py_True;
            Py_DECREF(none_inside);
            if (!known) {
                Py_SETREF(ke, PyObject_CallOneArg(prune, e));
                if (ke == NULL) goto fail;
                if (Py_TYPE(ke) != EqnType) {
                    PyErr_SetString(PyExc_TypeError, "dce_walk_vars: prune gave no Eqn");
                    goto fail_ke;
                }
            }
        }
        if (PyList_Append(kept, ke) < 0) goto fail_ke;
        PyObject *ins = atoms_of(ke, 1);
        Py_DECREF(ke);
        if (ins == NULL) goto fail;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(ins); k++) {
            PyObject *x = PySequence_Fast_GET_ITEM(ins, k);
            if (Py_TYPE(x) == VarType && PySet_Add(live, x) < 0) {
                Py_DECREF(ins);
                goto fail;
            }
        }
        Py_DECREF(ins);
        continue;
    fail_ke:
        Py_DECREF(ke);
        goto fail;
    }
    Py_DECREF(eqns);
    Py_RETURN_NONE;
fail:
    Py_DECREF(eqns);
    return NULL;
}

/* dce_sweep(eqns, k, live, kept, has_live_effects) -> (k, changed)
 * `passes.dce._DCE._sweep`'s loop, step for step, from eqns[k] down: an equation none of whose
 * results is in `live` (a set of the atoms themselves) is left out when
 * `has_live_effects(e)` is false; one whose parameters are known to hold no jaxpr
 * (`no_subjaxprs`) is appended to `kept` and its operands that are Vars added to `live`.
 * It stops at the first other one (its bodies are the Python loop's, with their rules) and
 * returns its index (-1 at the end) and whether it left any equation out. */
static PyObject *dce_sweep(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyTuple_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PySet_CheckExact(args[2]) || !PyList_CheckExact(args[3]) || EqnType == NULL) {
        PyErr_SetString(PyExc_TypeError, "dce_sweep: bad arguments");
        return NULL;
    }
    PyObject *eqns = args[0], *live = args[2], *kept = args[3], *effects = args[4];
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k >= PyTuple_GET_SIZE(eqns)) {
        PyErr_SetString(PyExc_IndexError, "dce_sweep: no such equation");
        return NULL;
    }
    int changed = 0;
    for (; k >= 0; k--) {
        PyObject *e = PyTuple_GET_ITEM(eqns, k);
        if (Py_TYPE(e) != EqnType) break; /* (the Python loop's) */
        PyObject *outs = get_slot(eqn_fields[2], e);
        if (outs == NULL) return NULL;
        if (!PyTuple_CheckExact(outs)) {
            Py_DECREF(outs);
            break;
        }
        int alive = eqn_alive(e, outs, live, effects);
        Py_DECREF(outs);
        if (alive < 0) return NULL;
        if (!alive) {
            changed = 1;
            continue;
        }
        PyObject *none_inside = get_slot(eqn_fields[6], e);
        if (none_inside == NULL) return NULL;
        int plain = none_inside == Py_True;
        Py_DECREF(none_inside);
        if (!plain) break; /* (its bodies: the Python loop's) */
        PyObject *ins = get_slot(eqn_fields[1], e);
        if (ins == NULL) return NULL;
        if (!PyTuple_CheckExact(ins)) {
            Py_DECREF(ins);
            break;
        }
        int bad = PyList_Append(kept, e) < 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ins) && !bad; i++) {
            PyObject *x = PyTuple_GET_ITEM(ins, i);
            bad = Py_TYPE(x) == VarType && PySet_Add(live, x) < 0;
        }
        Py_DECREF(ins);
        if (bad) return NULL;
    }
    return Py_BuildValue("nO", k, changed ? Py_True : Py_False);
}

/* ------------------------------------------------------------------ the clean-up passes */

/* `core.eqn_subjaxprs(e) == []` where each parameter value of `e` says so at once, as
 * `_collect_jaxprs` reads it: its type's kind is `_LEAF` (`_KIND_OF_TYPE`), or it is a tuple or
 * a list that `marshal` writes (no jaxpr, and no holder of one); the answer is then remembered
 * on `e` (`no_subjaxprs`), as `eqn_subjaxprs` remembers it.  0 where a value needs the
 * Python walk (a jaxpr, a holder, a type not kinded yet), 1, or -1 with an exception set. */
static int params_plain(PyObject *e) {
    if (kind_of_type == NULL) return 0;
    PyObject *params = get_slot(eqn_fields[3], e);
    if (params == NULL) return -1;
    int plain = PyDict_CheckExact(params);
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (plain && PyDict_Next(params, &pos, &k, &v)) {
        PyObject *kind = PyDict_GetItemWithError(kind_of_type, (PyObject *)Py_TYPE(v));
        if (kind == kind_leaf) continue;
        if (kind == NULL && PyErr_Occurred()) {
            plain = -1;
            break;
        }
        plain = 0;
        if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
            PyObject *bytes = PyMarshal_WriteObjectToString(v, 2);
            if (bytes != NULL) {
                Py_DECREF(bytes);
                plain = 1;
            } else if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                PyErr_Clear(); /* (an element marshal does not write: the Python walk's) */
            } else {
                plain = -1;
            }
        }
    }
    Py_DECREF(params);
    if (plain == 1 && set_slot(eqn_fields[6], e, Py_True) < 0) return -1;
    return plain;
}

/* whether the pass's Python step would take `e` as it is (`passes.common.EqnRewrite.rewritten`
 * gives it back unchanged): no jaxpr inside (its `no_subjaxprs`, else `params_plain(e)`, else
 * `subjaxprs(e)`; both remember an empty answer on it) and no operand that is a Var `env`
 * renames; sets `*ins` (a new reference) to its operands, a tuple.  1, 0 (the Python step's),
 * or -1 with an exception set */
static int untouched(PyObject *e, PyObject *env, PyObject *subjaxprs, PyObject **ins) {
    *ins = NULL;
    PyObject *none_inside = get_slot(eqn_fields[6], e);
    if (none_inside == NULL) return -1;
    int plain = none_inside == Py_True;
    Py_DECREF(none_inside);
    if (!plain && (plain = params_plain(e)) < 0) return -1;
    if (!plain) {
        PyObject *found = PyObject_CallOneArg(subjaxprs, e);
        if (found == NULL) return -1;
        plain = PyList_CheckExact(found) && PyList_GET_SIZE(found) == 0;
        Py_DECREF(found);
        if (!plain) return 0;
    }
    PyObject *inputs = get_slot(eqn_fields[1], e);
    if (inputs == NULL) return -1;
    if (!PyTuple_CheckExact(inputs)) {
        Py_DECREF(inputs);
        return 0;
    }
    if (PyDict_GET_SIZE(env)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(inputs); i++) {
            PyObject *x = PyTuple_GET_ITEM(inputs, i);
            if (Py_TYPE(x) != VarType) continue; /* (a literal is never renamed) */
            int renamed = PyDict_Contains(env, x);
            if (renamed) {
                Py_DECREF(inputs);
                return renamed < 0 ? -1 : 0;
            }
        }
    }
    *ins = inputs;
    return 1;
}

/* the arguments every sweep of a pass takes first: (eqns, k, env, kept, subjaxprs), checked;
 * k read into `*k`.  0, or -1 with an exception set */
static int sweep_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                      Py_ssize_t *k) {
    if (nargs != want || !PyTuple_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PyDict_CheckExact(args[2]) || !PyList_CheckExact(args[3]) || EqnType == NULL ||
        VarType == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: bad arguments", name);
        return -1;
    }
    *k = PyLong_AsSsize_t(args[1]);
    if (*k == -1 && PyErr_Occurred()) return -1;
    if (*k < 0) {
        PyErr_Format(PyExc_IndexError, "%s: no such equation", name);
        return -1;
    }
    return 0;
}

/* untouched_at: `untouched` of eqns[k] (*e, borrowed), 0 where it is no plain Eqn: the
 * head of both sweeps' loops */
static int untouched_at(PyObject *eqns, Py_ssize_t k, PyObject *env, PyObject *subjaxprs,
                        PyObject **e, PyObject **ins) {
    *e = PyTuple_GET_ITEM(eqns, k);
    if (Py_TYPE(*e) != EqnType) return 0;
    return untouched(*e, env, subjaxprs, ins);
}

/* cse_sweep(eqns, k, env, kept, subjaxprs, table) -> k
 * `passes.cse._cse`'s loop, step for step, from eqns[k] on: an equation that `untouched`
 * finds unchanged is filed in `table` under (prim, operands) (`setdefault`) and appended to
 * `kept` when it is the first of its key; it stops at the first other one (a key seen before,
 * a jaxpr inside, an operand renamed: the Python step's, which files it again, as
 * `setdefault` allows) and returns its index (len(eqns) at the end) */
static PyObject *cse_sweep(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t k;
    if (sweep_args("cse_sweep", args, nargs, 6, &k) < 0) return NULL;
    if (!PyDict_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "cse_sweep: bad arguments");
        return NULL;
    }
    PyObject *eqns = args[0], *env = args[2], *kept = args[3], *table = args[5];
    for (; k < PyTuple_GET_SIZE(eqns); k++) {
        PyObject *e, *ins;
        int plain = untouched_at(eqns, k, env, args[4], &e, &ins);
        if (plain < 0) return NULL;
        if (!plain) break;
        PyObject *prim = get_slot(eqn_fields[0], e);
        PyObject *key = prim == NULL ? NULL : PyTuple_Pack(2, prim, ins);
        Py_XDECREF(prim);
        Py_DECREF(ins);
        if (key == NULL) return NULL;
        PyObject *first = PyDict_SetDefault(table, key, e); /* borrowed */
        Py_DECREF(key);
        if (first == NULL) return NULL;
        if (first != e) break; /* (a key seen before: the Python step's) */
        if (PyList_Append(kept, e) < 0) return NULL;
    }
    return PyLong_FromSsize_t(k);
}

/* an operand of `e` is a literal or a result `consts` holds (`_simplify`'s loop over the
 * operands of an equation whose rule needs a constant); 1, 0, or -1 with an exception set */
static int constant_operand(PyObject *e, PyObject *consts) {
    PyObject *inputs = get_slot(eqn_fields[1], e);
    if (inputs == NULL) return -1;
    int found = 0;
    for (Py_ssize_t i = 0; !found && i < PyTuple_GET_SIZE(inputs); i++) {
        PyObject *a = PyTuple_GET_ITEM(inputs, i);
        found = Py_TYPE(a) != VarType ? 1 : PyDict_Contains(consts, a);
    }
    Py_DECREF(inputs);
    return found;
}

/* simplify_rules_sweep(eqns, k, env, kept, subjaxprs, rules, producers, ctx, made,
 *                      same_type, consts) -> k
 * `passes.simplify._simplify`'s loop, step for step, from eqns[k] on: an equation that
 * `untouched` finds unchanged, with one result and its primitive's (rule, fills,
 * needs_constant) in `rules`, whose rule is None, needs a constant operand and has none
 * (`constant_operand`: it would answer None), or answers (`rule(e, ctx)`) None or an atom
 * not of its result's type (`same_type`), is the producer of its result in `producers`,
 * told to `made(e, fills)` when `fills` is not None and appended to `kept`; it stops at the
 * first other one (an
 * answer that replaces it, which the Python step asks again; several results; rules not
 * yet looked up; a jaxpr inside; an operand renamed) and returns its index (len(eqns) at
 * the end) */
static PyObject *simplify_rules_sweep(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t k;
    if (sweep_args("simplify_rules_sweep", args, nargs, 11, &k) < 0) return NULL;
    if (!PyDict_CheckExact(args[5]) || !PyDict_CheckExact(args[6]) ||
        !PyDict_CheckExact(args[10])) {
        PyErr_SetString(PyExc_TypeError, "simplify_rules_sweep: bad arguments");
        return NULL;
    }
    PyObject *eqns = args[0], *env = args[2], *kept = args[3], *rules = args[5];
    PyObject *producers = args[6], *ctx = args[7], *made = args[8], *same_type = args[9];
    PyObject *consts = args[10];
    for (; k < PyTuple_GET_SIZE(eqns); k++) {
        PyObject *e, *ins;
        int plain = untouched_at(eqns, k, env, args[4], &e, &ins);
        if (plain < 0) return NULL;
        if (!plain) break;
        Py_DECREF(ins);
        PyObject *outs = get_slot(eqn_fields[2], e), *prim = NULL;
        if (outs == NULL) return NULL;
        if (!PyTuple_CheckExact(outs) || PyTuple_GET_SIZE(outs) != 1) goto python;
        if ((prim = get_slot(eqn_fields[0], e)) == NULL) goto fail;
        PyObject *got = PyDict_GetItemWithError(rules, prim); /* borrowed */
        if (got == NULL) {
            if (PyErr_Occurred()) goto fail;
            goto python; /* (looked up by the Python step: `Context.rules_of`) */
        }
        if (!PyTuple_CheckExact(got) || PyTuple_GET_SIZE(got) != 3) goto python;
        PyObject *rule = PyTuple_GET_ITEM(got, 0), *fills = PyTuple_GET_ITEM(got, 1);
        if (rule != Py_None && PyTuple_GET_ITEM(got, 2) == Py_True) {
            int constant = constant_operand(e, consts);
            if (constant < 0) goto fail;
            if (!constant) rule = Py_None; /* (it would answer None) */
        }
        if (rule != Py_None) {
            PyObject *r = PyObject_CallFunctionObjArgs(rule, e, ctx, NULL);
            if (r == NULL) goto fail;
            int replaces = 0;
            if (r != Py_None) {
                PyObject *out = PyTuple_GET_ITEM(outs, 0);
                PyObject *same = PyObject_CallFunctionObjArgs(same_type, r, out, NULL);
                replaces = same == NULL ? -1 : PyObject_IsTrue(same);
                Py_XDECREF(same);
            }
            Py_DECREF(r);
            if (replaces < 0) goto fail;
            if (replaces) goto python; /* (the Python step asks the rule again and drops it) */
        }
        if (PyDict_SetItem(producers, PyTuple_GET_ITEM(outs, 0), e) < 0) goto fail;
        if (fills != Py_None) {
            PyObject *r = PyObject_CallFunctionObjArgs(made, e, fills, NULL);
            if (r == NULL) goto fail;
            Py_DECREF(r);
        }
        if (PyList_Append(kept, e) < 0) goto fail;
        Py_DECREF(outs);
        Py_DECREF(prim);
        continue;
    python:
        Py_DECREF(outs);
        Py_XDECREF(prim);
        break;
    fail:
        Py_DECREF(outs);
        Py_XDECREF(prim);
        return NULL;
    }
    return PyLong_FromSsize_t(k);
}

/* ------------------------------------------------------------------ the module */

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Take the IR classes and their slot descriptors."},
    {"read_lines", (PyCFunction)(void (*)(void))read_lines, METH_FASTCALL,
     "FastPath.read_run's loop over plain lines (see the source)."},
    {"name_var_lines", (PyCFunction)(void (*)(void))name_var_lines, METH_FASTCALL,
     "_Printer._name_eqns' loop over ordinary equations (see the source)."},
    {"drop_unread_vars", (PyCFunction)(void (*)(void))drop_unread_vars, METH_FASTCALL,
     "_Printer._drop_unused's loop (see the source)."},
    {"lay_lines_until", (PyCFunction)(void (*)(void))lay_lines_until, METH_FASTCALL,
     "pretty.format's loop over the lines of a jaxpr (see the source)."},
    {"render_eqn", (PyCFunction)(void (*)(void))render_eqn, METH_FASTCALL,
     "printer._render_eqn (see the source)."},
    {"bind_fast_vars", (PyCFunction)(void (*)(void))bind_fast_vars, METH_FASTCALL,
     "Builder.bind's lines where its operands are atoms and its result types known."},
    {"dce_walk_vars", (PyCFunction)(void (*)(void))dce_walk_vars, METH_FASTCALL,
     "builder.dce_eqns' backward loop (see the source)."},
    {"dce_sweep", (PyCFunction)(void (*)(void))dce_sweep, METH_FASTCALL,
     "passes.dce._DCE._sweep's loop (see the source)."},
    {"cse_sweep", (PyCFunction)(void (*)(void))cse_sweep, METH_FASTCALL,
     "passes.cse._cse's loop over the equations it files as they are (see the source)."},
    {"simplify_rules_sweep", (PyCFunction)(void (*)(void))simplify_rules_sweep, METH_FASTCALL,
     "passes.simplify._simplify's loop over the equations it keeps (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "jaxprtool._twin",
                                    "The compiled twin of the reader's and the printer's "
                                    "per-line loops (text/twin.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__twin(void) {
    struct {
        PyObject **slot;
        const char *text;
    } strs[] = {{&str_eqn_start, "eqn_start"}, {&str_eq, " = "},  {&str_colon, ":"},
                {&str_space, " "},             {&str_empty, ""},  {&str_under, "_"},
                {&str_open, "["},              {&str_close_sp, "] "}, {&str_equals, "="},
                {&str_typed, "typed"},         {&str_counter, "counter"}, {&str_type, "type"},
                {&str_close, "]"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if ((*strs[i].slot = PyUnicode_InternFromString(strs[i].text)) == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
