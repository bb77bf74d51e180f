"""Reading inputs, writing outputs atomically, and reporting located errors."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator

from .cachefs import uid
from .core import JaxprError, Loc, NotJaxprText, OverLimit, UsageProblem, shown_path
from .echo import echo
from .lazy import LazyPattern


def __getattr__(name: str):
    """`UsageError`, click's usage error of the tool (bad usage: exit 2), made where one is
    raised: the class is click's, and the common commands' start imports no click."""
    if name == "UsageError":
        # (why a value cannot carry it: not state but a class, made once on first use so that
        # the common commands' start imports no click; then an ordinary module attribute)
        global UsageError
        import click

        class UsageError(click.UsageError):
            """Bad usage: exit 2."""

        return UsageError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Reported(Exception):
    """Diagnostics were printed already (e.g. every checker error of an input): exit 1."""

    exit_code = 1


class ReportedTrouble(Reported):
    """Diagnostics of trouble were printed already (an input file that could not be read,
    among others that were): exit 2, as bad usage."""

    exit_code = 2


#: the most bytes an input may hold (the global `--max-input-size`)
DEFAULT_MAX_INPUT = 256 * 2**20


class FoundPath(str):
    """A path that a folder walk found (not one the user named): read only when it is a
    regular file, opened without blocking (a FIFO planted under that name cannot hang the
    walk)."""


def read_source(file: str | None, limit: int = DEFAULT_MAX_INPUT) -> tuple[str, str]:
    """(text, display path) from a path, `-` or None (standard input); at most `limit`
    bytes (--max-input-size: `/dev/zero` or an endless pipe is refused, naming it, instead
    of filling the memory)."""
    if file in (None, "-"):
        path = "<stdin>"
        data = _read_capped(sys.stdin.buffer, path, 0, limit)
    else:
        try:
            with _open_input(file) as f:
                data = _read_capped(f, file, os.fstat(f.fileno()).st_size, limit)
        except OSError as e:
            raise UsageProblem(f"cannot read '{file}': {e.strerror}", None) from None
        path = str(file)  # (a FoundPath says how to open it; the program's locations are text)
    return decode_input(data, path), path


def decode_input(data: bytes, path: str) -> str:
    """The text of an input's bytes (UTF-8, a byte-order mark dropped), or the located error
    saying why they are not jaxpr text (binary data, invalid UTF-8, a NUL byte)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark (some editors write one): not part of the text
    kind = _binary_kind(data)
    if kind is not None:  # said plainly, without quoting its bytes
        raise NotJaxprText(f"this is a binary file ({kind}), not jaxpr text", Loc(path, 1, 1))
    return _text(data, path)


def _text(data: bytes, path: str) -> str:
    """The text of an input, or the located error at its first invalid UTF-8 or NUL byte.  A
    file with a NUL byte is not text (`/proc/self/environ`): its lines are never quoted."""
    nul = data.find(b"\0")
    _sources.pop(path, None)  # (the excerpt is of this input, not of an older one so named)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if nul < 0 or e.start < nul:
            if nul < 0:
                remember_source(path, data.decode("utf-8", "replace"))
            err = NotJaxprText("input is not valid UTF-8", _byte_loc(data, e.start, path))
            raise err from None
    if nul >= 0:
        raise NotJaxprText("a NUL byte: this is not jaxpr text", _byte_loc(data, nul, path))
    return text


def _byte_loc(data: bytes, at: int, path: str) -> Loc:
    """The location of byte `at` (its column in characters)."""
    line = data[:at].count(b"\n") + 1
    start = data.rfind(b"\n", 0, at) + 1
    return Loc(path, line, len(data[start:at].decode("utf-8", "replace")) + 1)


def _open_input(file: str):
    """The input file, opened for reading; a found one only if it is a regular file."""
    if not isinstance(file, FoundPath):
        return open(file, "rb")
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    os.set_blocking(fd, True)
    return open(fd, "rb")


#: the bytes read at a time from a stream whose size is not known
_CHUNK = 2**22


def _read_capped(f, path: str, size_hint: int, limit: int) -> bytes:
    """The bytes of `f`, refused (at `path`) past `limit`."""
    chunks, total = [], 0
    want = min(size_hint, limit) + 1 if size_hint else _CHUNK
    while chunk := f.read(want):
        total += len(chunk)
        if total > limit:
            raise OverLimit(
                f"the input is larger than {human_size(limit)}, the most read "
                "(--max-input-size SIZE raises the limit)",
                Loc(path, 1, 1),
            )
        chunks.append(chunk)
        want = _CHUNK
    return b"".join(chunks)


def human_size(n: int) -> str:
    """`256 MiB`, `1.5 GiB`, `100 bytes`."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


#: how binary files given as programs begin, and what they are
_BINARY_MAGICS = (
    (b"PK\x03\x04", "a zip archive: an .npz of arrays is read with --args or --consts"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"\x93NUMPY", "a numpy .npy array: arrays are read with --arg or --input @FILE"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"\x7fELF", "an executable"),
)


def _binary_kind(data: bytes) -> str | None:
    """What a binary file is, from its first bytes, or None (other bytes that are not text
    get the parser's located message, which quotes them escaped)."""
    for magic, kind in _BINARY_MAGICS:
        if data.startswith(magic):
            return kind
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle, never read"
    return None


class Pieces:
    """A text handed out a piece at a time as it is written: a program's printout
    (`printer.print_jaxpr_pieces`) reaches its file or standard output without ever being
    one string, nor its lines one list (at grad of 400k equations, 75 MB and 21 MB of memory
    fresh from the system, the kernel clearing each page).  Iterating hands the pieces out,
    once; `str()` makes the whole text, once, for what needs it (colour, several parts)."""

    __slots__ = ("_pieces",)

    def __init__(self, pieces: Iterable[str]):
        self._pieces = iter(pieces)

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    def __str__(self) -> str:
        return "".join(self._pieces)


def write_output(
    text: str | bytes | Pieces, out: str | None, *, replacing: str | None = None
) -> None:
    """Write to standard output, or to `out`.

    A regular file (new or existing) is replaced atomically: a temporary file in the same
    folder is renamed into place, so a failed run leaves neither a partial file nor a
    clobbered input.  The new file gets the old file's mode without its set-id bits, or the
    umask's default for a new one.  A symbolic link is followed and its target replaced, as
    editors do, except a link that another user planted in a shared sticky folder (as the
    kernel's protected_symlinks rule and OpenSSH do); another user's file and a read-only
    file are never replaced.  A file that is not regular (a FIFO, a character device) or is
    reached through a descriptor (`/dev/stdout`, `/proc/self/fd/1`) is written into.
    `replacing` (fmt -i) is the text the file held when it was read: a file edited since is
    left alone.  Errors name the path and the reason."""
    data = _encoded(text)
    if out in (None, "-"):
        _write_stdout(data)
        return
    st = _output_stat(out)
    if st is not None and (not stat.S_ISREG(st.st_mode) or _through_descriptor(out)):
        _write_into(out, data)
        return
    target = _followed_target(out)
    folder = _existing_folder(out, target)
    if st is not None:
        _check_replaceable(out, st)
    mode = stat.S_IMODE(st.st_mode) & ~SET_ID_BITS if st is not None else 0o666 & ~_umask()
    read_as = _unchanged_file(out, target, replacing) if replacing is not None else None
    _remove_stale_temps(folder)
    try:
        fd, tmp = _new_temp_file(folder)
    except OSError as e:
        raise UsageProblem(
            f"cannot write '{out}': folder '{os.path.dirname(out) or '.'}': {e.strerror}"
        ) from None
    try:
        with _removed_on_sigterm(tmp), os.fdopen(fd, "wb") as f:
            for piece in data:
                f.write(piece)
            f.flush()
            os.chmod(tmp, mode)
            if read_as is not None:
                _check_same_file(out, target, read_as)
            os.replace(tmp, target)
    except OSError as e:
        _unlink_quietly(tmp)
        raise UsageProblem(f"cannot write '{out}': {e.strerror}") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise


#: an ASCII text is encoded and written this many characters at a time
_WRITE_PIECE = 1 << 20


def _encoded(text: str | bytes | Pieces):
    """`text` as UTF-8 bytes, in pieces: an ASCII text (a program's, nearly always) a piece
    at a time, never as a second copy of the whole (78 MB for a gradient of a million
    equations); any other text at once, so that an encoding error comes before a byte is
    written.  `Pieces` each as it comes (a printout, which holds no lone surrogate: the
    reader decodes its input strictly; were one there, a file would still be left alone)."""
    if isinstance(text, bytes):
        return (text,)
    if isinstance(text, Pieces):
        return (piece.encode("utf-8") for piece in text)
    if len(text) <= _WRITE_PIECE or not text.isascii():
        return (text.encode("utf-8"),)
    return (text[i : i + _WRITE_PIECE].encode("ascii") for i in range(0, len(text), _WRITE_PIECE))


def _new_temp_file(folder: str) -> tuple[int, str]:
    """A new, empty file in `folder` (descriptor, path), named `.jaxprtool-PID-RANDOM.tmp`
    and made as `tempfile.mkstemp` makes one: O_CREAT|O_EXCL (never an existing file or a
    link), mode 0600, the name drawn again if taken.  (`tempfile`'s import, with `shutil`,
    `random` and `hashlib`, costs ~3 ms of the command.)"""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".jaxprtool-{os.getpid()}-{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", folder)


#: setuid and setgid: never carried over to a file the tool writes
SET_ID_BITS = stat.S_ISUID | stat.S_ISGID
_TEMP_NAME = LazyPattern(r"\.jaxprtool-(\d+)-[^/]*\.tmp")


def _followed_target(out: str) -> str:
    """Where writing `out` lands (links followed), refusing a link another user planted on
    the way (`refuse_planted_links`)."""
    refuse_planted_links(out)
    return os.path.realpath(out)


def refuse_planted_links(out: str, what: str | None = None) -> None:
    """Refuse `out` when a symbolic link on its path, the folders on the way or the file
    itself, is in a world-writable sticky folder (/tmp) and is neither the user's nor the
    folder owner's: another user planted it there (the kernel's protected_symlinks rule and
    OpenSSH refuse to follow such a link).  Links are resolved as the kernel resolves them,
    each link's target walked in turn; a path that does not exist yet ends the walk."""
    me = uid()
    pending = os.path.abspath(out).split("/")[1:]
    here, hops = "/", 0
    while pending and hops <= 40:  # (the kernel's limit of links followed)
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        step = os.path.join(here, part)
        try:
            lst = os.lstat(step)
        except OSError:
            return
        if not stat.S_ISLNK(lst.st_mode):
            here = step
            continue
        hops += 1
        folder = os.stat(here)
        shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        if shared and lst.st_uid not in (me, folder.st_uid):
            shown = what or f"'{out}'"
            raise UsageProblem(
                f"cannot write {shown}: '{step}' is a symbolic link that another "
                f"user (uid {lst.st_uid}) made in the shared folder '{here}': not followed; "
                "remove it or write elsewhere"
            )
        target = os.readlink(step)
        here = "/" if target.startswith("/") else here
        pending = target.split("/") + pending


def _check_replaceable(out: str, st: os.stat_result) -> None:
    """Refuse to replace another user's file (the new one would be ours) or a read-only one
    (as an editor asks first); `st` is what `out` reaches."""
    me = uid()
    if me >= 0 and st.st_uid != me:
        raise UsageProblem(
            f"cannot write '{out}': it belongs to another user (uid {st.st_uid}): not replaced; "
            "write elsewhere"
        )
    if not st.st_mode & stat.S_IWUSR:
        raise UsageProblem(
            f"cannot write '{out}': it is read-only (mode {stat.S_IMODE(st.st_mode):04o}); "
            "`chmod u+w` it first to replace it"
        )


def _unchanged_file(out: str, target: str, text: str) -> os.stat_result:
    """The status of `target` as it is now, after checking that it still holds `text` (what
    was read): an edit saved while the tool ran is never overwritten."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UsageProblem(f"cannot write '{out}': {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        data = f.read(len(text.encode("utf-8")) + 4)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if data.decode("utf-8", "replace") != text:
        _changed(out)
    return st


def _check_same_file(out: str, target: str, before: os.stat_result) -> None:
    try:
        now = os.lstat(target)
    except OSError:
        _changed(out)
    same = (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns)
    if same != (before.st_ino, before.st_dev, before.st_size, before.st_mtime_ns):
        _changed(out)


def _changed(out: str):
    raise UsageProblem(
        f"cannot write '{out}': it changed while it was being formatted; not replaced, run again"
    )


def _remove_stale_temps(folder: str) -> None:
    """Remove this tool's temporary files left in `folder` by a run that was killed: the
    user's own regular files named `.jaxprtool-PID-*.tmp` whose process is gone."""
    try:
        names = [n for n in os.listdir(folder) if _TEMP_NAME.fullmatch(n)]
    except OSError:
        return
    for name in names:
        pid = int(_TEMP_NAME.fullmatch(name).group(1))
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid() and not _alive(pid):
            _unlink_quietly(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@contextlib.contextmanager
def _removed_on_sigterm(tmp: str):
    """While `tmp` exists, SIGTERM removes it before the process ends as it would have."""
    import threading

    from .interrupt import signal  # (the C module: `interrupt.py` says why)

    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or previous == signal.SIG_IGN:
        yield
        return

    def on_term(signum, frame):
        _unlink_quietly(tmp)
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _output_stat(out: str):
    """What is at `out` (following links: /dev/stdout is the process's standard output), or
    None; a directory or an unreadable path is a usage problem."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UsageProblem(f"cannot write '{out}': {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageProblem(f"cannot write '{out}': it is a directory")
    return st


def check_writable(out: str | None) -> None:
    """Raise the error `write_output(..., out)` would for a missing folder or a directory,
    before anything is written (a command writing two files checks both first)."""
    if out in (None, "-"):
        return
    st = _output_stat(out)
    if st is None or stat.S_ISREG(st.st_mode):
        _existing_folder(out, _followed_target(out))


def _existing_folder(out: str, target: str) -> str:
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise UsageProblem(
            f"cannot write '{out}': folder '{os.path.dirname(out) or '.'}' does not exist"
        )
    return folder


def _through_descriptor(path: str) -> bool:
    """Whether `path` reaches its file through a process's descriptor (`/proc/self/fd/1`,
    `/dev/stdout`, `/dev/fd/3`): such a file is written into, since replacing the link's
    target would leave the descriptor's holder (the shell's `>`) with the old file."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's limit of links followed
        parent = os.path.realpath(os.path.dirname(p))
        if re.fullmatch(r"/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd", parent):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def _write_stdout(data) -> None:
    """Write the pieces `data` (bytes) to standard output through its file descriptor when
    it has one: a buffered write that the file-size limit cuts short can end without an
    error, os.write cannot."""
    sys.stdout.flush()
    out = sys.stdout.buffer
    out.flush()
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (tests)
        for piece in data:
            out.write(piece)
        out.flush()
        return
    for piece in data:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]


def _write_into(out: str, data) -> None:
    """Write the pieces `data` (bytes) into a special file (a terminal, a pipe, /dev/stdout)
    instead of replacing it."""
    try:
        with open(out, "wb") as f:
            for piece in data:
                f.write(piece)
    except OSError as e:
        raise UsageProblem(f"cannot write '{out}': {e.strerror}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


#: --color: "auto" (a terminal, unless NO_COLOR), "always" or "never"; set by the CLI
COLOR_MODE = "auto"


def is_terminal(stream=None) -> bool:
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def use_color(stream=None) -> bool:
    """Whether to colour what goes to `stream` (standard error by default): `--color
    always|never` decides; else a non-empty NO_COLOR turns colour off and a non-empty
    FORCE_COLOR on (no-color.org, force-color.org: an empty value counts as unset); else
    colour on a terminal only."""
    if COLOR_MODE in ("always", "never"):
        return COLOR_MODE == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return is_terminal(stream)


def console(stream=None, **kwargs):
    """A rich Console for `stream` (standard error by default) that colours exactly when
    `use_color` says so; rich decides the width (the terminal's, else COLUMNS, else 80)."""
    from rich.console import Console

    stream = stream or sys.stderr
    color = use_color(stream)
    kwargs.setdefault("highlight", False)
    kwargs.setdefault("emoji", False)
    if color:
        system = "auto" if is_terminal(stream) else "standard"
        # (no_color=False: rich would otherwise read NO_COLOR itself, and `--color always`
        # must win over it; the tool's decision alone drives the console)
        return Console(
            file=stream, force_terminal=True, color_system=system, no_color=False, **kwargs
        )
    return Console(file=stream, no_color=True, color_system=None, force_terminal=False, **kwargs)


def highlighted(text: str, stream=None):
    """`text` (jaxpr source) as rich Text, coloured by the jaxpr Pygments lexer."""
    from rich.syntax import Syntax

    from .ui.lexer import JaxprLexer

    syntax = Syntax("", JaxprLexer(), theme="ansi_dark", background_color="default")
    out = syntax.highlight(text)
    out.rstrip()
    return out


def write_program(text: str | Pieces, out: str | None) -> None:
    """A program's text to `out`, or to standard output, syntax-highlighted when that is a
    terminal with colour on (the characters are the same; only escape codes are added)."""
    if out in (None, "-") and use_color(sys.stdout) and is_terminal(sys.stdout):
        con = console(sys.stdout, soft_wrap=True)
        con.print(highlighted(str(text).rstrip("\n")))
        sys.stdout.flush()
        return
    write_output(text, out)


class progress:
    """A transient rich status line on standard error for work that may take a while: shown
    only on a terminal, and only once the work has run for `delay` seconds; never when
    standard error is piped.  It reads `DESCRIPTION: stage: 1,234 of 5,678 steps (21%),
    12 s`: `update(text)` changes the description, `stage(name)` (or `progress_stage`, from
    code that has no handle) names the phase, `count(done, total)` the steps done, and the
    elapsed time ticks on its own.  A progress opened inside another shows in the outer one's
    line (one status line at a time)."""

    #: the progress lines open now, outermost first
    open: list = []

    def __init__(self, description: str, delay: float = 1.0):
        self.description = description
        self.delay = delay
        self.phase = None
        self.done = None
        self.status = None
        self.timer = None
        self.lock = None
        self.start_time = None
        self.outer = None

    @property
    def active(self) -> bool:
        """Whether this line can be shown (a terminal): callers skip counting otherwise."""
        return self.lock is not None or (self.outer is not None and self.outer.active)

    def __enter__(self):
        import time

        self.start_time = time.monotonic()
        if progress.open:
            self.outer = progress.open[-1]
            self.saved = (self.outer.description, self.outer.phase, self.outer.done)
            self.outer._set(self.description, None, None)
            progress.open.append(self)
            return self
        progress.open.append(self)
        if not is_terminal(sys.stderr) or os.environ.get("TERM") == "dumb":
            return self
        import threading

        self.lock = threading.Lock()
        self.timer = threading.Timer(self.delay, self._start)
        self.timer.daemon = True
        self.timer.start()
        return self

    def _text(self) -> str:
        import time

        parts = [shown_path(self.description)]  # (a file name it holds)
        if self.phase:
            parts.append(self.phase)
        if self.done is not None:
            k, n = self.done
            parts.append(f"{k:,} of {n:,} steps ({100 * k // max(n, 1)}%)")
        return ": ".join(parts) + f", {time.monotonic() - self.start_time:.0f} s"

    def _start(self):
        import threading

        with self.lock:
            if self.timer is None:
                return
            self.status = console(sys.stderr).status(self._text())
            self.status.start()
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self):
        import time

        while True:
            time.sleep(0.5)
            with self.lock:
                if self.status is None:
                    return
                self.status.update(self._text())

    def _set(self, description, phase, done) -> None:
        if self.outer is not None:
            self.outer._set(description, phase, done)
            return
        self.description, self.phase, self.done = description, phase, done
        if self.lock is None:
            return
        with self.lock:
            if self.status is not None:
                self.status.update(self._text())

    def _current(self):
        outer = self
        while outer.outer is not None:
            outer = outer.outer
        return outer

    def update(self, description: str) -> None:
        self._set(description, None, None)

    def stage(self, name: str | None) -> None:
        top = self._current()
        self._set(top.description, name, None)

    def count(self, done: int, total: int) -> None:
        top = self._current()
        self._set(top.description, top.phase, (done, total))

    def __exit__(self, *exc):
        if progress.open and progress.open[-1] is self:
            progress.open.pop()
        if self.outer is not None:
            self.outer._set(*self.saved)
            return False
        if self.lock is None:
            return False
        with self.lock:
            self.timer.cancel()
            self.timer = None
            if self.status is not None:
                self.status.stop()
                self.status = None
        return False


@contextlib.contextmanager
def progress_stage(name: str):
    """Name the phase `name` in the open progress line (parse, check, print, ...) while the
    block runs; nothing when none is open."""
    if not progress.open:
        yield
        return
    line = progress.open[-1]
    top = line._current()
    saved = top.phase, top.done
    line.stage(name)
    try:
        yield
    finally:
        top._set(top.description, *saved)


_sources: dict[str, str] = {}
#: the line of its file each remembered source starts on (a part of a split file; else 1)
_first_lines: dict[str, int] = {}
#: where each line of a remembered source starts (computed on the first message about it)
_line_starts: dict[str, list[int]] = {}


def remember_source(path: str, text: str, first_line: int = 1) -> None:
    """Keep the text of an input (or of a part of it starting on line `first_line` of the
    file) so that error messages can quote the offending line.

    ANSI colour escapes are removed, as the parser removes them before it counts lines
    and columns (a coloured TTY dump): excerpts and program locations use the same text."""
    if "\x1b" in text:
        from .text.grammar import ANSI

        text = ANSI.sub("", text)
    _sources[path] = text
    _first_lines[path] = first_line
    _line_starts.pop(path, None)
    _sources.pop(_LAST, None)
    _sources[_LAST] = path


_LAST = "\0last"


def program_loc(where: str) -> Loc | None:
    """Where the top-level jaxpr of the last input lists its inputs (`{ lambda ...`) or its
    outputs (the last `in (`), for errors about the program as a whole."""
    path = _sources.get(_LAST)
    text = _sources.get(path) if path else None
    if text is None:
        return None
    loc = text_loc(path, text, where)
    lines = _first_lines.get(path, 1) - 1
    return loc._replace(line=loc.line + lines) if loc and lines else loc


def text_loc(path: str, text: str, where: str) -> Loc | None:
    """`program_loc` in the given text of `path`: "inputs", "outputs" or "input N" (that
    binder of the top-level jaxpr)."""
    pos = text.find("{ lambda") if where.startswith("input") else text.rfind("in (")
    if where.startswith("input ") and pos >= 0:
        pos = _binder_pos(text, pos, int(where.split()[1]))
    if pos < 0:
        return None
    line = text.count("\n", 0, pos) + 1
    return Loc(path, line, pos - (text.rfind("\n", 0, pos) + 1) + 1)


def _binder_pos(text: str, start: int, n: int) -> int:
    """Where the n-th input binder (`a:f32[3]`) of the lambda at `start` begins, or `start`
    when the header does not read plainly."""
    semi = text.find(";", start)
    head_end = text.find(". let", semi)
    if semi < 0 or head_end < 0:
        return start
    binders = list(re.finditer(r"\S+", text[semi + 1 : head_end]))
    return semi + 1 + binders[n].start() if n < len(binders) else start


def format_error(err: JaxprError, kind: str = "error", code: str | None = None) -> str:
    """`FILE:LINE:COL: error: message [CODE]`, then the source line and a caret when
    known."""
    locate(err)
    message = shorten_words(err.message)
    message = _COMMAND_LINE.sub(lambda m: repr(m.group(1))[1:-1] + m.group(2), message)
    message = shown_path(message, keep="\n")  # a name it quotes: no raw ESC, BEL or CR
    where = f"{shown_path(err.loc.file)}:{err.loc.line}:{err.loc.col}: " if err.loc else ""
    if code:
        first, nl, rest = message.partition("\n")
        message = f"{first} [{code}]{nl}{rest}"
    lines = [f"{where}{kind}: {message}"]
    if err.loc and err.loc.file in _sources:
        line = _source_line(err.loc.file, err.loc.line)
        if line is not None:
            shown, col = _escaped(line.replace("\t", " ").replace("\r", " "), err.loc.col)
            text, col = _excerpt(shown, col)
            lines.append(GUTTER + text)
            lines.append(GUTTER + " " * (col - 1) + "^")
    return "\n".join(lines)


#: a line break in a message (inside a file name it quotes) before what a CI system would
#: read as a command: shown escaped
_COMMAND_LINE = LazyPattern(r"([\r\n]+)(\s*(?:::|##))")

#: what begins each quoted line of a source: never the source itself, which could hold a
#: CI system's command (GitHub's runner reads `::error ...` at the start of any line, after
#: spaces)
GUTTER = "  | "


def locate(err: JaxprError) -> None:
    """An error about the program as a whole is located at its inputs or its outputs."""
    if err.loc is None and isinstance(getattr(err, "where", None), str):
        err.loc = program_loc(err.where)


def _source_line(path: str, n: int) -> str | None:
    """Line `n` (1-based, lines end at '\n' as for the parser's locations) of a remembered
    source, or None.  The line starts are computed once per source, so that reporting many
    errors in a large file stays linear."""
    text = _sources[path]
    n -= _first_lines.get(path, 1) - 1
    starts = _line_starts.get(path)
    nl = "\n" if "\n" in text or "\r" not in text else "\r"  # old Mac line endings: CR
    if starts is None:
        starts = _line_starts[path] = [0, *(m.end() for m in re.finditer(nl, text))]
    count = len(starts) - (1 if not text or text.endswith(nl) else 0)
    if not 1 <= n <= count:
        return None
    end = text.find(nl, starts[n - 1])
    return text[starts[n - 1] : end if end >= 0 else len(text)]


#: the widest excerpt of a source line quoted under a message
EXCERPT = 120


def shorten_words(message: str) -> str:
    """`message` with each huge word cut to its start (a name, a number, an option value:
    a message quoting a 100 KB value stays readable)."""
    if len(message) <= 2 * EXCERPT:
        return message
    return _LONG_WORD.sub(lambda m: m.group()[: EXCERPT // 2] + "...", message)


#: a huge word in a message (no spaces, no quotes: a quoted name's closing quote stays)
_LONG_WORD = LazyPattern(r"[^\s']{%d,}" % EXCERPT)


def _escaped(line: str, col: int) -> tuple[str, int]:
    """The line with control characters (an escape sequence that retitles the terminal, a
    NUL byte) shown escaped as `\\x1b`, as the messages show them, and the caret's column
    in it."""
    if line.isprintable():
        return line, col
    parts = [c if c.isprintable() else repr(c)[1:-1] for c in line]
    return "".join(parts), len("".join(parts[: col - 1])) + 1


def _excerpt(line: str, col: int) -> tuple[str, int]:
    """At most EXCERPT characters of `line` around column `col` (1-based), with `...`
    where cut, and the caret's column in the excerpt."""
    if len(line) <= EXCERPT:
        return line, col
    start = max(0, min(col - 1 - EXCERPT // 2, len(line) - EXCERPT))
    text = line[start : start + EXCERPT]
    head = "..." if start > 0 else ""
    tail = "..." if start + EXCERPT < len(line) else ""
    return head + text + tail, col - start + len(head)


def report(err: JaxprError, kind: str = "error") -> None:
    """Report a located diagnostic to the running invocation's sink (`diagnostics`): on
    standard error (rich colour on a terminal), or in the machine format `--output-format`
    chose."""
    from . import diagnostics

    diagnostics.current().report(err, kind, TextForm)


class TextForm:
    """What the diagnostics' emitters ask of this module (handed to them with each
    diagnostic, so that `diagnostics` imports nothing from here): locating an error about
    the program as a whole, the text of a diagnostic with its source excerpt, and its
    printing on standard error."""

    @staticmethod
    def locate(err: JaxprError) -> None:
        locate(err)

    @staticmethod
    def format(err: JaxprError, kind: str, code: str | None) -> str:
        return format_error(err, kind, code)

    @staticmethod
    def show(msg: str, kind: str) -> None:
        print_diagnostic(msg, kind)


def print_diagnostic(msg: str, kind: str) -> None:
    """A text diagnostic (`format_error`'s) on standard error, coloured on a terminal."""
    if use_color():
        from rich.markup import escape

        head, _, rest = msg.partition("\n")
        colour = "red" if kind == "error" else "yellow"
        where, text = _split_head(head, kind)
        console(sys.stderr, soft_wrap=True).print(
            (f"[bold]{escape(where)}[/bold] " if where else "")
            + f"[bold {colour}]{kind}:[/] "
            + escape(text)
            + ("\n" + escape(rest) if rest else "")
        )
    else:
        echo(msg, err=True)


def _split_head(head: str, kind: str) -> tuple[str, str]:
    """('FILE:LINE:COL:', message) of a diagnostic's first line; ('', message) when it has
    no location ('error: ...')."""
    if head.startswith(f"{kind}: "):
        return "", head[len(kind) + 2 :]
    where, _, text = head.partition(f" {kind}: ")
    return where, text


def warn(message: str, loc: Loc | None = None, code: str | None = None) -> None:
    """A warning; `code` its diagnostic code (default W100, `diagnostics.CODES`)."""
    report(JaxprError(message, loc, code), "warning")
