"""Rematerialization: which residuals of a linearization to save and which to recompute.

A linearization (`linearize.linearize_jaxpr`) passes every residual from the primal program to
the linear one.  A *plan* chooses a set of primal values to save instead, from which every
residual can be recomputed through the primal program's own equations; `apply_plan` rewrites
the pair so that the primal program returns the saved values and the linear program recomputes
the others.  Plans come from

* a JAX policy (`everything_saveable`, `nothing_saveable`, `dots_saveable`,
  `dots_with_no_batch_dims_saveable`, `save_only_these_names=a,b`,
  `save_any_names_but_these=a,b`): a residual is saved when the policy lets its equation's
  result be saved, else that equation is recomputed from its operands, recursively, as
  `jax.checkpoint(policy=...)` does; JAX's offload policies
  (`offload_dot_with_no_batch_dims(src, dst)`, `save_and_offload_only_these_names(...)`)
  save a value in host memory: `device_put` copies there after the equation that makes it
  and back inside the linear program's `remat2` call, as JAX's `partial_eval_jaxpr_custom`
  emits them (policies are parsed from JAX's call syntax, never evaluated);
* `min-cut`: the saved set of fewest bytes, recomputing only cheap equations (the record
  field `remat == "cheap"`: element-wise and shape equations), found as a minimum s-t cut
  (scipy's `maximum_flow`) of the graph whose nodes are values split into in/out halves with
  the value's bytes as capacity (AOTAutograd's partitioner);
* a byte budget: the residuals held must fit it, recomputing what costs least (FLOPs from
  `ui.stats.eqn_flops`) among the pure equations: an exact 0/1 program (scipy's `milp`, HiGHS)
  when there are at most `EXACT_LIMIT` candidate equations, else the greedy heuristic of
  `_greedy_budget`.

The parts, in the order the data flows (`rematerialize`): the request (`Spec`, passed from
the command to `grad_jaxpr(remat=...)`/`linearize_jaxpr`, whose split builder carries it to
the rules' nested linearizations: `linearize_masked`), the joint graph (`Graph`: the linearization's primal
program and the residuals its linear program reads), the segments (`find_segments`:
`--remat-segments auto|none|N`; each call with a body and each scan body is a segment of its
own, planned when its rule linearizes it, `copies` times for a scan; in the program, the
repeated layers, else about sqrt(n) stretches; `Graph.cut` makes the values crossing them
saved), the solver (`plan_for`: a policy, the min-cut or a budget, which under segments
bounds the planned peak: `planned_peak`), the placement (`apply_plan`).

The recomputation is emitted as JAX emits it: per segment, the stretch of the linear
program from the first to the last equation that reads a value the segment recomputes (or
copies back), widened so that the stretches cover the linear program from its start
(`_close_gaps`: the equations between two stretches join one, cut where the fewest linear
bytes cross, so each segment's call holds its whole backward, as JAX's per-layer checkpoint
does), becomes ONE `remat2[differentiated=True prevent_cse=True]` call whose body
copies the offloaded values back, recomputes each recomputed equation once and then runs
that stretch, as JAX's `remat_partial_eval` puts a checkpoint's whole linear part in one
call (without segments, one call for the whole program: JAX's `jax.checkpoint(f)`).
Transposed, each call stays a call whose operands include the cotangents arriving at its
segment, and JAX's remat lowering and the tool's `run`/`compile` put its operands through an
`optimization_barrier`, so XLA neither merges the recomputation back into the forward pass
nor hoists it (or the copies back) ahead of the backward step that needs it: one segment's
recomputed values are alive at a time.

Values held in memory anyway cost nothing: the program's inputs and constants.  The bytes of a
plan are the device bytes of the other saved values (primal outputs included); an offloaded
value's are the plan's `bytes_offloaded`.
"""

# (the parts, in the order the data flows; names are re-exported for the callers)
from .budget import (  # noqa: F401
    EXACT_LIMIT,
    ILP_NODE_LIMIT,
    ILP_TIME_LIMIT,
    REFINE_TRIES,
    _candidates,
    _greedy_budget,
    _ilp_budget,
    _peak_budget_plan,
    _unmeetable,
    budget_plan,
    planned_peak,
    smallest_budget,
)
from .entry import (  # noqa: F401
    _masked_info,
    _reruns,
    _with_saved,
    counted_at,
    plan_for,
    rematerialize,
    rematerialize_masked,
)
from .graph import (  # noqa: F401
    Graph,
    Plan,
    _by_id,
    _plan_from_saved,
    _signature,
    policy_plan,
)
from .mincut import (  # noqa: F401
    min_cut_plan,
    min_cut_saved,
)
from .records import (  # noqa: F401
    _planned_inside,
    all_bytes,
    body_saves,
    cheap,
    eqn_saves,
    in_host,
    nbytes,
    recomputable,
    remat_class,
    rerun_eqn,
)
from .request import (  # noqa: F401
    _ALIASES,
    _KINDS,
    _KNOWN,
    _NAME_LISTS,
    _PLAIN,
    _SAVE_AND_OFFLOAD,
    _SIZE,
    _TOKEN,
    _UNITS,
    POLICIES,
    Offload,
    Spec,
    _bind,
    _both,
    _Call,
    _call_spec,
    _did_you_mean,
    _items,
    _kind,
    _names,
    _policy_arg,
    _tokens,
    _value,
    check_names,
    decision,
    parse_budget,
    parse_policy,
    with_segments,
)
from .rewrite import (  # noqa: F401
    _close_gaps,
    _copy,
    _hoist_nonlinear,
    _in_space,
    _offload_copies,
    _offloaded_from,
    _remat_call,
    _remat_stretch,
    _rounded,
    apply_plan,
    feed_results,
)
from .segments import (  # noqa: F401
    LAYER_MIN_EQNS,
    LAYERS_COVER,
    SQRT_FROM,
    Segments,
    _body_size,
    _crossing,
    _cuts_near,
    _even_starts,
    _layer_starts,
    _regular_marks,
    find_segments,
)
