""".npy and .npz files read in two steps: the headers first, the data once checked.

A file's header declares its arrays' dtypes and shapes; `open_arrays` reads only the
headers (of every member of an .npz, without inflating it) and returns `Declared` arrays,
so that the caller can compare the declared types with the program's and the memory
limit before a byte of data is read.  `Declared.read()` then reads exactly the declared
number of bytes: a header claiming 4 TB, a zip member that inflates beyond its header
(a zip bomb), `/dev/zero` or a truncated file is an error, never a MemoryError or a hang.
Nothing is unpickled: an array of Python objects is refused from its header.
"""

from __future__ import annotations

import io
import math
import os
import stat
import sys
import zipfile
from dataclasses import dataclass
from typing import Callable

from .core import JaxprError
from .lazy import np

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
#: the largest .npy header read (numpy's own default limit)
_MAX_HEADER = 10000


@dataclass
class Declared:
    """An array whose header was read: its dtype and shape, and how to read its data."""

    dtype: np.dtype
    shape: tuple[int, ...]
    #: how messages name it: "'in.npz' member arg0", "'x.npy'", "standard input"
    name: str
    _read: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def read(self) -> np.ndarray:
        return self._read()


def source_name(path: str) -> str:
    return "standard input" if path == "-" else f"'{path}'"


def open_arrays(path: str, what: str, budget: int) -> Declared | dict[str, Declared]:
    """The arrays of an .npy file (one `Declared`) or an .npz archive (member name without
    `.npy` -> `Declared`), from `path` or `-` (standard input).  `budget`: the most bytes
    a stream (a pipe, standard input, a device) may hold, read before a zip can be opened."""
    name = source_name(path)
    stream = _open(path, what)
    head = _read_upto(stream, 8)
    if not head:
        raise JaxprError(f"cannot read {what} from {name}: it is empty")
    if head.startswith(_NPY_MAGIC):
        return _npy(_Prefixed(head, stream), name, what)
    if head.startswith(_ZIP_MAGICS):
        return _npz(_seekable(head, stream, name, what, budget), name, what)
    raise JaxprError(
        f"cannot read {what} from {name}: it is not .npy or .npz data (pickles and other "
        "formats are never read)"
    )


def _open(path: str, what: str):
    if path == "-":
        return sys.stdin.buffer
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise JaxprError(f"cannot read {what} file '{path}': no such file") from None
    except OSError as e:
        raise JaxprError(f"cannot read {what} file '{path}': {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise JaxprError(f"cannot read {what} file '{path}': it is a directory")
    os.set_blocking(fd, True)  # opened non-blocking only so that a FIFO cannot hang open()
    return os.fdopen(fd, "rb")


def _seekable(head: bytes, stream, name: str, what: str, budget: int):
    """A zip needs seeking: a regular file is used as it is; a stream is read into memory,
    at most `budget` bytes."""
    if stream.seekable():
        stream.seek(0)
        return stream
    data = head + _read_upto(stream, budget + 1 - len(head))
    if len(data) > budget:
        raise JaxprError(
            f"cannot read {what} from {name}: it holds more than the memory limit of "
            f"{_human(budget)} (set JAXPRTOOL_MAX_MEMORY to change it)"
        )
    return io.BytesIO(data)


def _header(stream, name: str, what: str) -> tuple[np.dtype, tuple[int, ...], bool]:
    """(dtype, shape, Fortran order) from an .npy header, the stream left at the data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream, max_header_size=_MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream, max_header_size=_MAX_HEADER)
        else:
            raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    except (ValueError, SyntaxError, EOFError, OSError, TypeError) as e:
        raise JaxprError(
            f"cannot read {what} from {name}: a corrupt or truncated .npy header ({e})"
        ) from None
    if dtype.hasobject:
        raise JaxprError(
            f"cannot read {what} from {name}: it holds an array of Python objects; only "
            "plain numeric arrays are read"
        )
    return dtype, tuple(int(n) for n in shape), bool(fortran)


def _npy(stream, name: str, what: str) -> Declared:
    dtype, shape, fortran = _header(stream, name, what)

    def read() -> np.ndarray:
        return _data(stream, dtype, shape, fortran, name, what)

    return Declared(dtype, shape, name, read)


def _npz(stream, name: str, what: str) -> dict[str, Declared]:
    try:
        archive = zipfile.ZipFile(stream)
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise JaxprError(f"cannot read {what} from {name}: truncated or corrupt ({e})") from None
    out: dict[str, Declared] = {}
    for info in infos:
        key = info.filename.removesuffix(".npy")
        member = f"{name} member {key}"
        try:
            with archive.open(info) as f:
                dtype, shape, fortran = _header(f, member, what)
                header_len = f.tell()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise JaxprError(
                f"cannot read {what} from {name}: truncated or corrupt ({e})"
            ) from None
        declared = math.prod(shape) * dtype.itemsize
        if info.file_size != header_len + declared:
            raise JaxprError(
                f"cannot read {what} from {member}: corrupt: the member inflates to "
                f"{info.file_size} bytes but its header declares {header_len + declared}"
            )
        out[key] = Declared(dtype, shape, member, _member_reader(archive, info, member, what))
    return out


def _member_reader(archive, info, member: str, what: str):
    def read() -> np.ndarray:
        try:
            with archive.open(info) as f:
                dtype, shape, fortran = _header(f, member, what)
                return _data(f, dtype, shape, fortran, member, what)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise JaxprError(
                f"cannot read {what} from {member}: truncated or corrupt ({e})"
            ) from None

    return read


def _data(stream, dtype, shape, fortran: bool, name: str, what: str) -> np.ndarray:
    """Exactly the declared bytes, as an array (writable, not a view of a file)."""
    size = math.prod(shape) * dtype.itemsize
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = stream.readinto(view[got:])
        if not n:
            raise JaxprError(
                f"cannot read {what} from {name}: truncated: its header declares {size} "
                f"bytes of data, it holds {got}"
            )
        got += n
    a = np.frombuffer(buf, dtype=dtype, count=math.prod(shape))
    return a.reshape(shape[::-1]).transpose() if fortran else a.reshape(shape)


def _read_upto(stream, n: int) -> bytes:
    """At most `n` bytes (fewer at the end of the stream)."""
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _Prefixed(io.RawIOBase):
    """A stream whose first bytes (already read to tell .npy from .npz) are given back."""

    def __init__(self, prefix: bytes, stream):
        self._prefix = prefix
        self._stream = stream
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
        else:
            n = self._stream.readinto(b) or 0
        self._pos += n
        return n

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            out = self._prefix + self._stream.read()
            self._prefix = b""
        else:
            out = self._prefix[:n]
            self._prefix = self._prefix[n:]
            if len(out) < n:
                out += self._stream.read(n - len(out)) or b""
        self._pos += len(out)
        return out

    def tell(self) -> int:
        return self._pos


def _human(n: int) -> str:
    from .backend.limits import human

    return human(n)
