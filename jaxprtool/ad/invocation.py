"""What one command or API call asks of the AD transformations, as one value.

An `Invocation` holds the rematerialization request and the list its plans go to, and the
custom-rule policy with its notes.  The builder carries it (`Builder.invocation`): a builder
made while another runs a rule (a body's linearization, a rule's helper program) takes the
running one's, so the rules of nested bodies read the same request (`builder.invocation()`)
and never a context variable or a global of their own.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

#: "default" (custom_vjp: error; custom_jvp: differentiate the body, warn once per function),
#: "body" (differentiate the body of both, warn), "strict" (error for both)
CUSTOM_RULE_POLICIES = ("default", "body", "strict")


class CustomRuleFallbacks:
    """The policy in force and the custom rules replaced by body derivatives so far
    (`notes`, one line per function, for the output's comment lines and check-grad)."""

    def __init__(self, policy: str = "default"):
        if policy not in CUSTOM_RULE_POLICIES:
            raise ValueError(f"unknown --custom-rules policy '{policy}'")
        self.policy = policy
        self.notes: list[str] = []

    def note(self, text: str) -> bool:
        """Record `text` once; True the first time."""
        if text in self.notes:
            return False
        self.notes.append(text)
        return True


class Invocation:
    """One command's or API call's request to the AD walks and their rules.

    `remat`: the rematerialization request (`remat.Spec`) or None; `plans`: the list the
    plans made for it go to (nested bodies first); `fallbacks`: the custom-rule policy and
    the notes of the custom rules replaced by their body's derivative; `observer`: the
    `observe.Observer` of the next outermost walk (None while one runs: `observe.take`);
    `step_notes`: the notes of the observed step whose rule is running (None: no observed
    step); `nested`: a walk nested in an observed step's rule is running; `memo`: the
    derivatives of call bodies made so far (`families.calls._memo`), shared by the
    invocations copied from one command's or API call's entry and dropped with it;
    `batch`: the batch axis being added (`batching._Ctx`; None outside a vmap)."""

    def __init__(
        self, remat=None, plans: list | None = None, fallbacks=None, observer=None, memo=None
    ):
        self.remat = remat
        self.plans = plans
        self.fallbacks = fallbacks if fallbacks is not None else CustomRuleFallbacks()
        self.observer = observer
        self.memo: dict = memo if memo is not None else {}
        self.step_notes: list[str] | None = None
        self.nested = False
        self.batch = None

    def with_remat(self, remat, plans) -> Invocation:
        """This invocation with another rematerialization request (the same policy,
        observer and notes): a linearization given its own request, inside or outside
        another."""
        if remat is self.remat and plans is self.plans:
            return self
        inv = Invocation(remat, plans, self.fallbacks, self.observer, self.memo)
        inv.step_notes, inv.nested, inv.batch = self.step_notes, self.nested, self.batch
        return inv


# The invocation a command or an API call starts its walks with: its custom-rule policy
# and its observer (`entry_invocation` copies it for a walk started outside any other; the
# rules then read the builder's).  (why a value cannot carry it: the AD commands reach the
# transformations through the pass pipeline (`passes.registry`) and the explain and
# check-grad drivers, whose steps take no invocation parameter yet; threading one through
# every transformation's entry point is issue 47's next step.)  A context variable, not a
# global: two threads' API calls never see each other's policy or observer.
_ENTRY: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "jaxprtool_ad_entry", default=None
)


def _entry() -> Invocation:
    entry = _ENTRY.get()
    if entry is None:  # a thread that set none: the default policy, its notes its own
        entry = Invocation()
        _ENTRY.set(entry)
    return entry


def custom_rule_fallbacks() -> CustomRuleFallbacks:
    """The policy a walk started here gets, and its notes."""
    return _entry().fallbacks


def for_call(custom_rules: str = "default") -> Invocation:
    """The invocation of one command or API call, from its `--custom-rules` flag or its
    `custom_rules=` argument (the observer of the context it starts in, if any)."""
    return Invocation(fallbacks=CustomRuleFallbacks(custom_rules), observer=_entry().observer)


def enter(invocation: Invocation) -> Invocation:
    """`invocation` is the one the walks started in the rest of this context (a command)
    get; returned."""
    _ENTRY.set(invocation)
    return invocation


@contextlib.contextmanager
def entered(invocation: Invocation) -> Iterator[Invocation]:
    """`invocation` for the walks started in the block (an API call); the one before
    restored after, so that one call never changes what the next one does."""
    token = _ENTRY.set(invocation)
    try:
        yield invocation
    finally:
        _ENTRY.reset(token)


def set_custom_rule_policy(policy: str) -> None:
    """`--custom-rules`: the policy for the rest of this context, notes empty."""
    enter(for_call(policy))


@contextlib.contextmanager
def custom_rule_policy(policy: str) -> Iterator[CustomRuleFallbacks]:
    """`policy` for the block, notes empty; the one before restored after."""
    with entered(for_call(policy)) as inv:
        yield inv.fallbacks


@contextlib.contextmanager
def entry_observer(observer) -> Iterator:
    """`observer` watches the outermost walks started in the block (`observe.observing`)."""
    entry = _entry()
    token = _ENTRY.set(Invocation(fallbacks=entry.fallbacks, observer=observer, memo=entry.memo))
    try:
        yield observer
    finally:
        _ENTRY.reset(token)


def entry_invocation(remat=None, plans: list | None = None) -> Invocation:
    """The invocation of a walk started outside any other: the request given, the policy
    and observer of this command or API call."""
    entry = _entry()
    return Invocation(remat, plans, entry.fallbacks, entry.observer, entry.memo)
