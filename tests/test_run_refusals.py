"""`run` refuses what it cannot do before doing it (issue 22, items 3 to 5): distributed runs
that cannot form, sizes beyond the program's types or the memory limit, and what a terminal
or a script sees (escaped control bytes, exit codes, output paths).

Each test checks the exact message and exit status: 1 with a message for a finding about
the input, 2 for usage, never a traceback, an abort or an internal error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

ROOT = Path(__file__).resolve().parents[1]
SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def error_line(r) -> str:
    return next(line for line in r.stderr.splitlines() if "error:" in line)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- 3. distributed runs


def _join(tmp_path, pid: int, nproc: int, port: int, cwd: Path | None = None) -> subprocess.Popen:
    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    # (in a working folder of its own, started with -P: as from the `jaxprtool` console
    # script, nothing but the child that `run --coordinator` restarts could import from it)
    python = [sys.executable] if cwd is None else [sys.executable, "-P"]
    cmd = [*python, "-m", "jaxprtool", "--no-color", "run", str(prog), "--random", "0"]
    cmd += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(nproc)]
    cmd += ["--process-id", str(pid), "--join-timeout", "2"]
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_distributed_run_that_cannot_form_is_an_error_naming_what_did_not_answer(tmp_path):
    """Process 1 with no coordinator listening or with a silent one, and process 0 of 3
    whose peers never start:
    each exits 1 within --join-timeout (plus JAX's start), with one line naming the
    coordinator, its process id and what did not answer, and no abort or stack dump.
    The first runs in a folder holding a planted `numpy.py`: `run --coordinator` restarts
    itself in a child process, which must not import it (test_trust_local.py's
    test_a_supervised_run_never_imports_a_module_from_the_working_folder, make test-full)."""
    from test_trust_local import PLANTED_NUMPY

    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "numpy.py").write_text(PLANTED_NUMPY)
    t0 = time.monotonic()
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # accepts, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    procs = [
        _join(tmp_path, 1, 2, _free_port(), cwd=planted),
        _join(tmp_path, 0, 3, _free_port()),
        _join(tmp_path, 1, 2, silent.getsockname()[1]),
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            outs.append((p.returncode, out.decode(), err.decode()))
    finally:
        silent.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert time.monotonic() - t0 < 60
    (rc1, out1, err1), (rc0, out0, err0), (rcs, outs_, errs) = outs
    assert not (planted / "PLANTED_RAN").exists(), err1
    assert (rc1, rc0, rcs, out1, out0, outs_) == (1, 1, 1, "", "", "")
    assert errs.split(":", 3)[3] == err1.split(":", 3)[3]  # the same message, its own port
    for err in (err1, err0):
        assert len(err.splitlines()) == 1, err  # no XLA log, no stack dump
        assert "Check failure" not in err and "Traceback" not in err
    assert err1.startswith("error: cannot join the distributed run at 127.0.0.1:") and err1.split(
        " (process 1 of 2): ", 1
    )[1].startswith(
        "the coordinator (process 0) did not answer within 2 s; start process 0 with the "
        "same --coordinator and --num-processes first, check the host and port, or raise "
        "--join-timeout (JAX: DEADLINE_EXCEEDED"
    )
    assert err0.split(" (process 0 of 3): ", 1)[1].startswith(
        "this process hosts the coordinator, and processes 1 to 2 did not join within 2 s; "
        "start every process with the same --coordinator and --num-processes, or raise "
        "--join-timeout (JAX: DEADLINE_EXCEEDED"
    )


@pytest.mark.parametrize(
    "address", ["127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:1\n", "host", ":80", "a b:80"]
)
def test_a_bad_coordinator_address_is_a_usage_error(address):
    r = tool("run", "-", "--random", "0", "--coordinator", address, "--num-processes", "2",
             "--process-id", "0", text=SIN)  # fmt: skip
    assert r.exit_code == 2
    assert f"bad --coordinator {address!r}: expected HOST:PORT with a port from 1 to 65535" in (
        r.output
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--devices", "4096"], "Invalid value for '--devices': 4096 is not in the range 1<=x<=1024."),
        (["--devices", "100000"], "Invalid value for '--devices': 100000 is not in the range 1<=x<=1024."),
        (
            ["--coordinator", "127.0.0.1:1234", "--process-id", "0", "--num-processes", str(10**9)],
            f"Invalid value for '--num-processes': {10**9} is not in the range 1<=x<=4096.",
        ),
        (["--mesh", f"x={10**9}"], f"bad --mesh 'x={10**9}': {10**9} devices; at most 65536"),
        (["--mesh", "x=512,y=512"], "bad --mesh 'x=512,y=512': 262144 devices; at most 65536"),
        (["--coordinator", "127.0.0.1:1234", "--process-id", "0", "--num-processes", "2",
          "--join-timeout", "0"], "Invalid value for '--join-timeout': 0 is not in the range"),
    ],
)  # fmt: skip
def test_device_and_process_counts_are_bounded(argv, message):
    r = tool("run", "-", "--random", "0", *argv, text=SIN)
    assert r.exit_code == 2 and message in r.output, r.output


# ---------------------------------------------------------------- 4. sizes before work


def _npy_header(shape, descr="<f4") -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def _located(r, path) -> str:
    line = error_line(r)
    assert line.startswith(f"{path}:"), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
    return line.split(": error: ", 1)[1]


def test_an_inline_input_is_checked_against_the_program_before_it_is_built(tmp_path):
    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    r = tool("run", prog, "--input", "f32[1000000000000]=1")
    assert r.exit_code == 1
    assert _located(r, prog) == "argument 0 (a): expected f32[3], got f32[1000000000000]"


def test_array_files_are_read_as_headers_first(tmp_path):
    """/dev/zero, an .npy header claiming 4 TB, an .npz member whose header claims more than
    it inflates to, a zip bomb (64 MiB of zeros in 64 KB) and truncated files: each a
    message before any large allocation."""
    import zipfile

    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    r = tool("run", prog, "--input", "@/dev/zero")
    assert r.exit_code == 1 and error_line(r) == (
        "error: cannot read argument from '/dev/zero': it is not .npy or .npz data (pickles "
        "and other formats are never read)"
    )
    big = tmp_path / "big.npy"
    big.write_bytes(_npy_header((10**12,)) + b"\0" * 16)
    r = tool("run", prog, "--arg", big)
    assert r.exit_code == 1
    assert _located(r, prog) == "argument 0 (a): expected f32[3], got f32[1000000000000]"
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as z:
        z.write(big, "arg0.npy")
    r = tool("run", prog, "--args", tmp_path / "big.npz")
    assert r.exit_code == 1 and error_line(r) == (
        f"error: cannot read arguments from '{tmp_path / 'big.npz'}' member arg0: corrupt: "
        "the member inflates to 144 bytes but its header declares 4000000000128"
    )
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("arg0.npy", "w") as m:
            m.write(_npy_header((2**24,)))
            for _ in range(64):
                m.write(bytes(2**20))
    assert (tmp_path / "bomb.npz").stat().st_size < 2**20
    r = tool("run", prog, "--args", tmp_path / "bomb.npz")
    assert r.exit_code == 1
    assert _located(r, prog) == "argument 0 (a): expected f32[3], got f32[16777216]"
    np.savez(tmp_path / "ok.npz", arg0=np.ones(3, np.float32))
    data = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    r = tool("run", prog, "--args", tmp_path / "cut.npz")
    assert r.exit_code == 1 and error_line(r) == (
        f"error: cannot read arguments from '{tmp_path / 'cut.npz'}': truncated or corrupt "
        "(File is not a zip file)"
    )
    np.save(tmp_path / "ok.npy", np.ones(3, np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:-4])
    r = tool("run", prog, "--arg", tmp_path / "cut.npy")
    assert r.exit_code == 1 and error_line(r) == (
        f"error: cannot read argument from '{tmp_path / 'cut.npy'}': truncated: its header "
        "declares 12 bytes of data, it holds 8"
    )


def test_a_declared_input_over_the_memory_limit_is_refused_at_the_inputs(tmp_path, monkeypatch):
    prog = tmp_path / "big.jaxpr"
    prog.write_text("{ lambda ; a:f32[16777216]. let b:f32[16777216] = sin a in (b,) }\n")
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", "1M")
    np.save(tmp_path / "small.npy", np.ones(3, np.float32))
    r = tool("run", prog, "--arg", tmp_path / "small.npy")
    assert r.exit_code == 1
    assert _located(r, prog) == (
        "running this program needs about 128.0 MB for its inputs and intermediates (the "
        "largest, f32[16777216], is an input: 64.0 MB), over the limit of 1.0 MB (set "
        "JAXPRTOOL_MAX_MEMORY to change it)"
    )


def test_expected_output_is_read_and_checked_before_the_run(tmp_path):
    """A bad --expected-output file is an error before the run: no outputs table."""
    import zipfile

    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    big = tmp_path / "out.npy"
    big.write_bytes(_npy_header((10**12,)) + b"\0" * 16)
    with zipfile.ZipFile(tmp_path / "want.npz", "w") as z:
        z.write(big, "out0.npy")
    r = tool("run", prog, "--random", "0", "--expected-output", tmp_path / "want.npz")
    assert r.exit_code == 1 and r.stdout == ""
    assert error_line(r) == (
        f"error: cannot read expected-output from '{tmp_path / 'want.npz'}' member out0: "
        "corrupt: the member inflates to 144 bytes but its header declares 4000000000128"
    )
    np.savez(tmp_path / "four.npz", out0=np.ones(4, np.float32))
    r = tool("run", prog, "--random", "0", "--expected-output", tmp_path / "four.npz")
    assert r.exit_code == 1 and r.stdout == ""
    assert error_line(r) == (
        f"error: '{tmp_path / 'four.npz'}' member out0 holds f32[4], but output 0 of the "
        "program is f32[3]"
    )


@pytest.mark.parametrize("value", ["inf", "1e400", "infG", "nan", "-1G", "0"])
def test_a_memory_limit_that_is_not_a_size_is_a_usage_error(value, monkeypatch):
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", value)
    r = tool("run", "-", "--random", "0", text=SIN)
    assert r.exit_code == 2
    assert error_line(r) == (
        f"error: JAXPRTOOL_MAX_MEMORY={value!r} is not a size: give a number of bytes from 1 "
        "to 2^63 with an optional K, M, G or T suffix, such as 8G"
    )


def test_the_default_memory_limit_honours_ulimit_v():
    """Under a 4 GiB address-space limit the default limit is half of it (a real
    RLIMIT_AS, set in a child process before the tool reads it)."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
        "from jaxprtool.backend.limits import default_limit; print(default_limit())"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAXPRTOOL_MAX_MEMORY"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) <= 2 << 30


def test_the_cgroup_memory_limit_is_read_for_v1_and_v2(tmp_path):
    from jaxprtool.backend.limits import cgroup_limit

    (tmp_path / "v2" / "job").mkdir(parents=True)
    (tmp_path / "v2" / "job" / "memory.max").write_text("3221225472\n")
    (tmp_path / "v2.table").write_text("0::/job\n")
    assert cgroup_limit(str(tmp_path / "v2"), str(tmp_path / "v2.table")) == 3 << 30
    (tmp_path / "v2" / "job" / "memory.max").write_text("max\n")
    assert cgroup_limit(str(tmp_path / "v2"), str(tmp_path / "v2.table")) is None
    (tmp_path / "v1" / "memory" / "job").mkdir(parents=True)
    (tmp_path / "v1" / "memory" / "job" / "memory.limit_in_bytes").write_text("1073741824\n")
    (tmp_path / "v1.table").write_text("4:memory:/job\n3:cpuset:/\n")
    assert cgroup_limit(str(tmp_path / "v1"), str(tmp_path / "v1.table")) == 1 << 30


@pytest.mark.parametrize(
    "dim, message",
    [
        ("b^(10^9)", "dimension expression 'b^(10^9)' exceeds 9223372036854775807 with the given sizes"),
        ("b**10**9", "dimension expression 'b**10**9' exceeds 9223372036854775807 with the given sizes"),
        ("floordiv(b,0)", "dimension expression 'floordiv(b,0)' has a division by zero"),
        ("max(9)", "dimension expression 'max(9)': max takes at least 2 arguments, got 1"),
        ("b-7", "dimension expression 'b-7' is -4, a negative size"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["run", "compile", "check-grad"])
def test_symbolic_dimension_bombs_are_located_errors(tmp_path, dim, message, command):
    """`b` is known (from --dim, or from the first argument's shape for check-grad); the
    second input's dimension expression is evaluated at once, never for minutes."""
    prog = tmp_path / "d.jaxpr"
    prog.write_text(f"{{ lambda ; a:f32[b] x:f32[{dim}]. let c:f32[b] = sin a in (c,) }}\n")
    if command == "check-grad":
        np.savez(tmp_path / "x.npz", arg0=np.ones(3, np.float32), arg1=np.ones(3, np.float32))
        argv = ["check-grad", prog, "--args", tmp_path / "x.npz"]
    else:
        argv = [command, prog, "--dim", "b=3"] + (["--random", "0"] if command == "run" else [])
    t0 = time.process_time()
    r = tool(*argv)
    assert time.process_time() - t0 < 30
    assert r.exit_code in (1, 2) and _located(r, prog) == message
    assert r.stdout == ""  # check-grad's summary of nothing checked went to standard output


def test_a_hundred_thousand_minus_signs_are_a_located_error(tmp_path):
    prog = tmp_path / "d.jaxpr"
    dim = "-" * 100_000 + "3"
    prog.write_text(f"{{ lambda ; a:f32[{dim}]. let  in (a,) }}\n")
    r = tool("run", prog, "--random", "0")
    assert r.exit_code == 1
    assert _located(r, prog).startswith("invalid dimension '-----")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dim", "b=-5"], "bad --dim 'b=-5': a size is from 0 to 9223372036854775807"),
        (["--dim", "b=" + "9" * 30], "a size is from 0 to 9223372036854775807"),
    ],
)
def test_negative_sizes_are_usage_errors(argv, message):
    r = tool("run", "-", "--random", "0", *argv, text=SIN)
    assert r.exit_code == 2 and message in r.output, r.output


@pytest.mark.parametrize("command", ["run", "check-grad", "explain"])
def test_a_negative_seed_is_a_usage_error(command):
    r = tool(command, "-", "--random", "-1", text=SIN)
    assert r.exit_code == 2
    assert "Invalid value for '--random': -1 is not in the range x>=0." in r.output, r.output


def test_standard_output_on_dev_full_is_an_error_not_a_traceback(tmp_path):
    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv in (["fmt", str(prog)], ["run", str(prog), "--random", "0"]):
        with open("/dev/full", "wb") as full:
            out = subprocess.run(
                [sys.executable, "-m", "jaxprtool", *argv], stdout=full,
                stderr=subprocess.PIPE, env=env, text=True,
            )  # fmt: skip
        assert out.returncode == 2
        assert out.stderr == "error: cannot write the output: No space left on device\n"


# ---------------------------------------------------------------- 5. a terminal and a script


def test_control_bytes_in_a_quoted_line_are_escaped(tmp_path):
    """A file ending in an OSC sequence (which retitles a terminal) is quoted escaped."""
    prog = tmp_path / "t.jaxpr"
    prog.write_bytes(SIN.rstrip("\n").encode() + b" \x1b]0;pwned\x07\n")
    r = tool("check", "-q", prog)
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        f"{prog}:1:53: error: unexpected text after the jaxpr: '\\x1b' [E001]",
        "  | " + SIN.rstrip("\n") + " \\x1b]0;pwned\\x07",
        "  | " + " " * 52 + "^",
    ]
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_a_binary_file_given_as_a_program_is_named_as_such(tmp_path):
    np.savez(tmp_path / "o.npz", out0=np.ones(3, np.float32))
    np.save(tmp_path / "o.npy", np.ones(3, np.float32))
    r = tool("check", "-q", tmp_path / "o.npz")
    assert r.exit_code == 1 and r.stderr == (
        f"{tmp_path / 'o.npz'}:1:1: error: this is a binary file (a zip archive: an .npz of "
        "arrays is read with --args or --consts), not jaxpr text [E002]\n"
    )
    r = tool("check", "-q", tmp_path / "o.npy")
    assert r.exit_code == 1 and r.stderr == (
        f"{tmp_path / 'o.npy'}:1:1: error: this is a binary file (a numpy .npy array: arrays "
        "are read with --arg or --input @FILE), not jaxpr text [E002]\n"
    )


ILL = "{ lambda ; a:f32[3]. let b:i32[3] = sin a in (b,) }\n"
ILL_ERROR = "1:26: error: sin: result type i32[3] does not match inferred f32[3]"


def test_diff_and_check_grad_of_an_ill_typed_file_exit_2(tmp_path):
    ill, good = tmp_path / "ill.jaxpr", tmp_path / "good.jaxpr"
    ill.write_text(ILL)
    good.write_text(SIN)
    for argv in (["diff", ill, good], ["diff", good, ill], ["check-grad", ill]):
        r = tool(*argv)
        assert r.exit_code == 2, (argv, r.output)
        assert error_line(r) == f"{ill}:{ILL_ERROR}"
    r = tool("check-grad", ill, good)
    assert r.exit_code == 2
    assert r.stdout.splitlines()[-1] == (
        "check-grad: 1 file, 3 checks, 0 failures, 1 not checked (errors above)"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["jvp", "--opt", "nosuch"], "Invalid value for --opt: unknown pass 'nosuch' (known: "),
        (["grad", "--opt", "dce{x=1}"], "Invalid value for --opt: unknown option 'x' for pass 'dce'"),
        (["vmap"], "vmap needs the batch size: give --axis-size N (a per-example program does not contain it)"),
    ],
)  # fmt: skip
def test_usage_errors_of_transformations_exit_2(argv, message):
    r = tool(*argv, "-", text=SIN)
    assert r.exit_code == 2 and message in r.output, r.output


def _names(n: int) -> list[str]:
    return [chr(97 + i // 26) + chr(97 + i % 26) for i in range(n)]


def test_a_write_cut_off_by_the_file_size_limit_exits_2_and_keeps_the_old_file(tmp_path):
    """Under `ulimit -f` (1 KB; set in the child before it runs the tool) a longer output
    is an error: -o keeps the old file and leaves no temporary; standard output too."""
    prog, out = tmp_path / "big.jaxpr", tmp_path / "out.jaxpr"
    v = _names(100)
    eqns = "".join(f"    {v[i]}:f32[3] = sin {v[i - 1]}\n" for i in range(1, 100))
    prog.write_text(f"{{ lambda ; {v[0]}:f32[3]. let\n{eqns}  in ({v[99]},) }}\n")
    out.write_text("old\n")
    limited = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
        "os.execv(sys.executable, [sys.executable, '-m', 'jaxprtool', *sys.argv[1:]])"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    for argv, where in ((["-o", str(out)], f"'{out}'"), ([], "the output")):
        with open(tmp_path / "stdout.txt", "wb") as sink:
            p = subprocess.run(
                [sys.executable, "-c", limited, "fmt", str(prog), *argv], stdout=sink,
                stderr=subprocess.PIPE, env=env, text=True,
            )  # fmt: skip
        assert p.returncode == 2, p.stderr
        assert p.stderr == f"error: cannot write {where}: File too large\n"
    assert out.read_text() == "old\n"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".jaxprtool-")]


def test_output_through_proc_self_fd_1_is_written_into_not_replaced(tmp_path):
    prog, out = tmp_path / "sin.jaxpr", tmp_path / "stdout.txt"
    prog.write_text(SIN)
    out.write_text("old contents, longer than the program's text " * 4)
    inode = out.stat().st_ino
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for path in ("/proc/self/fd/1", "/dev/stdout"):
        with open(out, "wb") as f:  # as the shell's `>` opens it
            p = subprocess.run(
                [sys.executable, "-m", "jaxprtool", "fmt", str(prog), "-o", path],
                stdout=f, stderr=subprocess.PIPE, env=env, text=True,
            )  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert out.stat().st_ino == inode and out.read_text() == SIN


def test_linearize_split_with_a_missing_folder_writes_nothing(tmp_path):
    primal = tmp_path / "p.jaxpr"
    r = tool("linearize", "--split", primal, tmp_path / "none" / "l.jaxpr", "-", text=SIN)
    assert r.exit_code == 2
    assert error_line(r) == (
        f"error: cannot write '{tmp_path / 'none' / 'l.jaxpr'}': folder "
        f"'{tmp_path / 'none'}' does not exist"
    )
    assert not primal.exists()


def test_separators_only_and_too_large_graphs_are_located(tmp_path):
    seps = tmp_path / "seps.jaxpr"
    seps.write_text("// -----\n// -----\n")
    r = tool("fmt", "--split-input-file", seps)
    assert r.exit_code == 1 and error_line(r) == (
        f"{seps}:1:1: error: no program in {seps}: every part between '# -----' lines is empty"
    )
    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    r = tool("graph", "--max-nodes", "2", prog)
    assert r.exit_code == 1 and error_line(r) == (
        f"{prog}:1:1: error: the graph has more than 2 nodes, too many to lay out quickly: "
        "draw it with --collapse-nested, draw a part of the program, or raise the limit with "
        "--max-nodes N"
    )
