"""Shared fixtures: the reference corpus in ../shared/jaxpr-format and JAX set-up."""

from __future__ import annotations

import atexit
import gc
import importlib
import itertools
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORMAT_DIR = Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format"))
CORPUS = FORMAT_DIR / "corpus"
DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# 8 host devices for the mesh tests; LLVM without its optimisations and XLA:CPU's
# fast-compile preset: the tests compare numbers, not speed, and compiling the few thousand
# small executables they run takes a quarter less CPU with the first and a sixth less again
# with the second (`make bench` keeps XLA's defaults)
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
    " --xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE",
)
# the tests neither read nor fill the user's caches (compiled executables, the analysed
# grammar): a run here costs what it costs on a fresh machine, and its outcome does not
# depend on what an earlier run left
_CACHE_HOME = tempfile.mkdtemp(prefix="jaxprtool-test-cache-")
atexit.register(shutil.rmtree, _CACHE_HOME, ignore_errors=True)
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME


_MODULE_IDS = itertools.count()


def written_module(folder: Path, stem: str, source: str):
    """`source` written to a module in `folder` and imported, for `jaxprtool trace
    NAME:fn` to trace from that folder (`contextlib.chdir(folder)`): its name is `stem_N`,
    new in this process (a second module of the same stem is not the first again); the
    folder is on sys.path only while it is imported."""
    name = f"{stem}_{next(_MODULE_IDS)}"
    (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


@pytest.fixture
def wrong_sin_rule():
    """Plant a wrong JVP rule for sin (d sin = g * sin x): jvp and vjp share it."""
    from jaxprtool.ad import ops, registry

    saved = registry.primitive_jvps["sin"], registry.rule_kind.get("sin")
    registry.defjvp("sin", lambda g, x, **_: ops.mul(g, ops.sin(x)))
    yield
    registry.primitive_jvps["sin"], registry.rule_kind["sin"] = saved


def corpus_files(sub: str, pattern: str = "*.jaxpr") -> list[Path]:
    """Files of one corpus folder; empty when the reference material is absent."""
    d = CORPUS / sub
    return sorted(d.glob(pattern)) if d.is_dir() else []


needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"reference corpus not found at {CORPUS} (set JAXPR_FORMAT_DIR)"
)


def _installed_jax() -> tuple[str, tuple[int, ...]]:
    """The installed JAX's version (read from its metadata: jax is not imported here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("jax")
    except PackageNotFoundError:
        return "none", (0,)
    return text, tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


JAX_VERSION_TEXT, JAX_VERSION = _installed_jax()


def needs_jax(first: str, what: str):
    """A test of what JAX `first` and later do: skipped on an older JAX (the floor run,
    `make test-floor`), saying that this JAX lacks `what`."""
    need = tuple(int(p) for p in first.split("."))
    return pytest.mark.skipif(
        JAX_VERSION < need,
        reason=f"the installed JAX {JAX_VERSION_TEXT} lacks {what} (JAX {first} has it)",
    )


@pytest.fixture(scope="session")
def explicit_mesh():
    """`explicit_mesh("x=2,y=2")`: a JAX mesh of those axes and sizes, every axis Explicit,
    on the first host CPU devices (the XLA_FLAGS above give 8), made once per text; a test
    that needs more devices than the process has is skipped, saying so."""
    jax = pytest.importorskip("jax")
    made = {}

    def make(text: str):
        if text not in made:
            axes = [part.split("=") for part in text.split(",")]
            names, shape = tuple(n for n, _ in axes), tuple(int(s) for _, s in axes)
            devices = jax.devices("cpu")
            if len(devices) < math.prod(shape):
                pytest.skip(f"mesh {text} needs {math.prod(shape)} host CPU devices")
            made[text] = jax.make_mesh(
                shape,
                names,
                axis_types=(jax.sharding.AxisType.Explicit,) * len(shape),
                devices=devices[: math.prod(shape)],
            )
        return made[text]

    return make


# ---------------------------------------------------------------- the default run samples sweeps
#: parametrised sweeps of which `make test` runs one case in N (the case at offset k of each N,
#: in collection order) and `make test-full` runs all: the rest are marked `slow`.  The three
#: AD checks of test_ad_structural take different offsets (0, 2, 4 of 6), so every other case
#: keeps one of them, each family several.
SAMPLED = {
    "test_jax_ad_suite.py::test_jax_ad": (44, 0),
    "test_ad_structural.py::test_jvp": (24, 0),
    "test_ad_structural.py::test_vjp": (24, 8),
    "test_ad_structural.py::test_dot_product": (24, 16),
    "test_ad_structural.py::test_jvp_of_vjp": (16, 0),
    "test_ad_special.py::test_special_first_and_second_order": (8, 0),
    "test_ad_special.py::test_fft_grad_and_second_order": (4, 0),
    "test_ad_special.py::test_fft_jvp_and_vjp_match_jax": (4, 1),
    "test_ad_special.py::test_fft_linearize_transpose": (4, 2),
    "test_printer_fast.py::test_fast_path_prints_the_document_text": (20, 0),
    "test_consts_order.py::test_every_ad_command_takes_the_traced_constants": (12, 0),
    "test_ad_elementwise.py::test_jvp_and_vjp_match_jax": (12, 0),
    "test_multidevice.py::test_run_vjp_jvp_linearize_match_jax": (8, 0),
    "test_ad_control_flow.py::test_jvp": (8, 0),
    "test_ad_control_flow.py::test_grad": (8, 1),
    "test_ad_control_flow.py::test_linearize": (8, 2),
    "test_ad_control_flow.py::test_vjp": (8, 3),
    "test_ad_control_flow.py::test_dot_product": (8, 5),
    "test_printer_jax_grads.py::test_run_gives_jax_numbers": (12, 0),
    "test_remat.py::test_policy_grad_and_bytes_against_jax": (4, 0),
    "test_state_ad_bodies.py::test_a_ref_into_shard_map_runs_and_differentiates_as_jax_s": (8, 0),
    "test_lit_goldens.py::test_numbers": (4, 0),
    "test_parser.py::test_corpus_file_parses": (2, 0),
    "test_ad_explicit_sharding.py::test_grad_keeps_sharding_and_matches_jax": (2, 0),
    "test_symbolic_conv_batching.py::test_vmap_of_grouped_conv_with_symbolic_features_matches_jax": (
        2,
        0,
    ),
    "test_ref_dce.py::test_linearize_and_transpose_drop_dead_ref_writes_as_jax_does": (2, 0),
    "test_ref_dce.py::test_grad_and_vjp_drop_dead_ref_writes_as_jax_does": (2, 1),
    "test_backend.py::test_eager_equals_compiled": (2, 0),
    "test_ad_special.py::test_integer_valued_primitives_differentiate_like_jax": (4, 1),
    "test_printer.py::test_older_and_dumps_round_trip": (2, 0),
    # (added when the default run was brought towards 5 CPU-minutes, issue 49)
    "test_corpus_derivatives.py::test_jvp_and_vjp_of_the_printed_program_are_jax_s": (3, 0),
    "test_remat_scan.py::test_saved_counts_and_values_against_jax": (4, 0),
    "test_remat_segments.py::test_layers_found_and_gradient_against_jax": (4, 0),
    "test_remat_segments.py::test_scan_body_per_iteration": (4, 1),
    "test_remat_segments.py::test_bodies_as_segments_against_jax": (4, 1),
    "test_run_every_primitive.py::test_run_matches_jax": (2, 0),
    "test_remat_count.py::test_grad_counts_values_and_residuals_against_jax": (2, 0),
    "test_custom_rules.py::test_softmax_rule_gives_jax_gradient_on_any_axis": (4, 0),
    "test_api_functions.py::test_jacobians_match_jax": (2, 0),
    "test_state_ad.py::test_grad_and_vjp_through_refs_are_jax_s": (4, 0),
    "test_state_ad.py::test_a_ref_written_inside_a_call_loop_or_branch_differentiates_as_jax_s": (
        4,
        1,
    ),
    "test_installed_jax.py::test_explain_and_memory": (3, 0),
    "test_installed_jax.py::test_check_grad": (3, 1),
    "test_remat.py::test_linear_program_dot_product": (2, 0),
    "test_symbolic_sharded_ad.py::test_transformations_match_jax": (3, 0),
    "test_remat_offload.py::test_grad_values_and_residuals_against_jax": (3, 0),
    "test_check_grad_verdicts.py::test_mlp_with_dropout_passes_in_float64": (3, 0),
    # (issue 49, item 4: the default run at most 5 CPU-minutes; each family keeps a case of
    # every kind of check, the rest in make test-full)
    "test_ad_special.py::test_fft_vmap_matches_jax": (4, 3),
    "test_remat_segments.py::test_segments_asked_for": (2, 0),
    "test_help_examples.py::test_the_help_example_runs": (2, 1),
    "test_jax_0_12_1_elementwise.py::test_run": (2, 0),
    "test_jax_0_12_1_elementwise.py::test_dot_product": (2, 1),
    "test_jax_0_12_1_elementwise.py::test_jvp": (2, 1),
    "test_jax_0_12_1_elementwise.py::test_vjp": (2, 0),
    "test_jax_0_12_1_elementwise.py::test_vmap": (2, 1),
    "test_jax_0_12_1_elementwise.py::test_grad": (2, 0),
    "test_installed_jax.py::test_grad_or_jvp_then_run": (2, 0),
    "test_installed_jax.py::test_vmap_then_run": (2, 1),
    "test_installed_jax.py::test_api_run_of_grad": (2, 0),
    "test_startup.py::test_commands_that_do_not_run_ask_numpy_for_one_blas_thread": (2, 0),
    "test_startup.py::test_integer_parameters_never_load_numpy": (2, 1),
    "test_state_ad.py::test_jacobians_and_hessian_through_refs": (2, 0),
    "test_state_ad.py::test_the_linear_program_through_refs_passes_the_dot_product_test": (3, 0),
    "test_state_ad_bodies.py::test_a_ref_into_a_traced_custom_rule_differentiates_as_jax_s": (3, 0),
    "test_state_ad_bodies.py::test_the_linear_program_through_a_shard_map_ref_passes_the_dot_product_test": (
        3,
        1,
    ),
    "test_symbolic_ad.py::test_grad_matches_jax": (2, 0),
    "test_symbolic_ad.py::test_jvp_matches_jax": (2, 1),
    "test_symbolic_ad.py::test_vjp_matches_jax": (2, 0),
    "test_symbolic_ad.py::test_vmap_matches_jax": (2, 1),
    "test_symbolic_ad.py::test_linearize_matches_jax_and_transposes": (2, 0),
    "test_symbolic_ad.py::test_jacobians_of_symbolic_size_match_jax": (2, 0),
    "test_symbolic_ad.py::test_real_fft_grad_of_symbolic_length_matches_jax": (3, 0),
    "test_symbolic_ad.py::test_byte_weighted_remat_at_the_given_sizes": (3, 0),
    "test_unplaced_inputs.py::test_show_sharding_and_values_are_jax_s": (3, 0),
    "test_unplaced_inputs.py::test_compile_leaves_the_same_arguments_unsharded_as_jax": (2, 0),
    "test_vmap.py::test_nonzero_batches_as_jax": (3, 0),
    "test_vmap.py::test_jacobians_match_jax": (2, 0),
    "test_vmap.py::test_one_row_jacobians_are_the_jvp_or_vjp_at_ones": (3, 0),
    "test_vmap.py::test_collectives_over_the_vmap_axis": (2, 0),
    "test_fuzz.py::test_pathological_input": (2, 0),
    "test_check_grad_verdicts.py::test_complex_programs_pass": (2, 0),
    "test_ad_reverse.py::test_vjp_and_grad_match_jax": (2, 0),
    "test_ad_reverse.py::test_dot_product_and_double_transpose": (2, 1),
    "test_custom_rules.py::test_library_rule_gives_jax_gradient_exactly_from_plain_text": (3, 0),
    "test_multidevice.py::test_vmap_of_shard_map_batches_the_body": (2, 0),
    "test_run_params.py::test_each_parameter_changes_the_result_as_in_jax": (2, 0),
    "test_older_text.py::test_old_text_runs_and_differentiates_like_jax": (2, 0),
    "test_printer_jax_grads.py::test_fmt_is_byte_identical": (2, 1),
    "test_symbolic_conv_batching.py::test_jacfwd_of_grouped_kernel_over_a_symbolic_basis_matches_jax": (
        3,
        0,
    ),
    # (issue 49, fifth round: the sweeps of budgets, samples and arguments not sampled yet;
    # a budget or sample of each kind stays in make test)
    # (the held-nothing device is also test_plans_are_made_while_the_plain_gradient_compiles's)
    "test_remat_fit.py::test_the_calibration_learns_what_the_device_holds": (2, 1),
    "test_remat_chain.py::test_chain_plan_meets_the_liveness_budget": (2, 0),
    "test_remat.py::test_min_cut_and_budget_grads": (2, 0),  # min-cut and the 0.1 budget
    "test_no_cycles.py::test_a_command_leaves_no_program_in_a_cycle": (2, 0),  # grad, one opt
    "test_explain.py::test_other_samples_run": (2, 0),
    "test_explain.py::test_program_shown_is_the_one_the_command_builds": (2, 0),
    "test_run_state_ad.py::test_jvp_of_run_state_is_jax_s": (3, 0),  # one argnums per program
    "test_api_functions.py::test_hessian_matches_jax": (2, 1),  # several argnums
    "test_ad_special.py::test_search_sorted_batches_like_jax": (2, 0),
}


def pytest_collection_finish(session):
    """The collector's objects (the test modules, JAX and the tool, loaded) frozen out of the
    garbage collector's generations, and collections 30 times rarer: the suite allocates
    millions of short-lived objects (tracers, equations) and spent about 5% of its CPU time in
    the collector (1.46 of 26.5 CPU-s on test_vmap, test_ad_special and test_printer), 2% with
    these settings (0.56 s).  Cycles are still collected, only later."""
    _listen_to_compiles()  # (JAX loaded by the test modules: their first test's compiles count)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)


def pytest_collection_modifyitems(config, items):
    seen: dict[str, int] = {}
    for item in items:
        path, _, test = item.nodeid.partition("::")  # (a case id may hold a `/`)
        key = path.rsplit("/", 1)[-1] + "::" + test.split("[", 1)[0]
        if key not in SAMPLED or "[" not in item.nodeid:
            continue
        n, k = SAMPLED[key]
        i = seen[key] = seen.get(key, -1) + 1
        # (a strict xfail, the sentinel of a known gap, runs in the default run too)
        if i % n != k and not item.get_closest_marker("xfail"):
            item.add_marker(pytest.mark.slow)


# ---------------------------------------------------------------- XLA compiles per test file
#: per test file: [XLA compile requests, those JAX's persistent cache answered, seconds in them],
#: counted from jax.monitoring's events in this process (a command run as a subprocess is not
#: counted); the xdist workers hand theirs to the controller, which prints the sums at the end
_COMPILES: dict[str, list] = {}
_CURRENT_FILE = ["(collection)"]
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def _count(event: str, seconds: float = 0.0) -> None:
    row = _COMPILES.setdefault(_CURRENT_FILE[0], [0, 0, 0.0])
    if event == _COMPILE_EVENT:
        row[0] += 1
        row[2] += seconds
    elif event == _CACHE_HIT_EVENT:
        row[1] += 1


def _listen_to_compiles() -> None:
    """jax.monitoring listeners counting compiles (once, when JAX is loaded in this process)."""
    if _listen_to_compiles.done or "jax" not in sys.modules:
        return
    from jax import monitoring

    monitoring.register_event_listener(lambda event, **_: _count(event))
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: _count(event, secs) if event == _COMPILE_EVENT else None
    )
    _listen_to_compiles.done = True


_listen_to_compiles.done = False


#: per test, with --cpu-ranking: [CPU seconds of the test process, of the processes it
#: started, XLA compile requests], set-up and teardown (a module's fixtures) included
_CPU: dict[str, list] = {}


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-ranking",
        type=int,
        default=0,
        metavar="N",
        help="list the N tests that took the most CPU time (user + sys, of the test process "
        "and of the processes it started), with their XLA compiles (issue 49)",
    )


def _cpu_seconds() -> tuple[float, float]:
    import resource

    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _listen_to_compiles()
    _CURRENT_FILE[0] = item.nodeid.split("::", 1)[0]
    ranked = item.config.getoption("cpu_ranking") > 0
    if ranked:
        row = _COMPILES.setdefault(_CURRENT_FILE[0], [0, 0, 0.0])
        own, children = _cpu_seconds()
        compiles = row[0]
    yield
    _listen_to_compiles()  # (a test that loaded JAX: its compiles count from the next test on)
    if ranked:
        own2, children2 = _cpu_seconds()
        _CPU[item.nodeid] = [own2 - own, children2 - children, row[0] - compiles]


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller sums
        session.config.workeroutput["compiles"] = {k: list(v) for k, v in _COMPILES.items()}
        session.config.workeroutput["cpu"] = _CPU


@pytest.hookimpl(optionalhook=True)  # (an xdist hook: unknown under -p no:xdist)
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", {})
    for path, (n, hits, secs) in out.get("compiles", {}).items():
        row = _COMPILES.setdefault(path, [0, 0, 0.0])
        row[0], row[1], row[2] = row[0] + n, row[1] + hits, row[2] + secs
    _CPU.update(out.get("cpu", {}))


def pytest_terminal_summary(terminalreporter):
    _print_cpu_ranking(terminalreporter)
    if not _COMPILES:
        return
    rows = sorted(_COMPILES.items(), key=lambda kv: -kv[1][2])
    total = [sum(r[i] for _, r in rows) for i in range(3)]
    write = terminalreporter.write_line
    terminalreporter.section("XLA compiles in the test processes (jax.monitoring)")
    write(f"total: {total[0]} compile requests, {total[1]} answered by the persistent cache,")
    write(f"       {total[2]:.1f} s in them, {len(rows)} test files")
    for path, (n, hits, secs) in rows[:15]:
        write(f"{secs:8.1f} s {n:6d} compiles {hits:5d} cached  {path}")


def _print_cpu_ranking(terminalreporter) -> None:
    n = terminalreporter.config.getoption("cpu_ranking")
    if n <= 0 or not _CPU:
        return
    rows = sorted(_CPU.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    write = terminalreporter.write_line
    terminalreporter.section(f"the {n} tests of most CPU time (--cpu-ranking)")
    total = sum(own + children for own, children, _ in _CPU.values())
    write(f"all {len(rows)} tests: {total:.1f} CPU-s (collection and start-up not included)")
    write("  CPU-s (of it in started processes)  XLA compiles  test")
    for nodeid, (own, children, compiles) in rows[:n]:
        write(f"{own + children:7.2f} ({children:6.2f}) {compiles:5d}  {nodeid}")
