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
    the notes of the custom rules replaced by their body's derivative."""

    def __init__(self, remat=None, plans: list | None = None, fallbacks=None):
        self.remat = remat
        self.plans = plans
        self.fallbacks = fallbacks if fallbacks is not None else CustomRuleFallbacks()

    def with_remat(self, remat, plans) -> Invocation:
        """This invocation with another rematerialization request (the same policy and
        notes): a linearization given its own request, inside or outside another."""
        if remat is self.remat and plans is self.plans:
            return self
        return Invocation(remat, plans, self.fallbacks)


# The policy a command's or an API call's walks start with (`Builder` reads it when no
# builder runs: `entry_invocation`).  (why a value cannot carry it: the AD commands reach the
# transformations through the pass pipeline (`passes.registry`), whose steps take no
# invocation yet; the rules themselves read the builder's `Invocation`.)  A context
# variable, not a global: two threads' API calls never see each other's policy.
_FALLBACKS: contextvars.ContextVar[CustomRuleFallbacks | None] = contextvars.ContextVar(
    "jaxprtool_custom_rule_fallbacks", default=None
)


def custom_rule_fallbacks() -> CustomRuleFallbacks:
    """The policy a walk started here gets, and its notes (a thread that set none: the
    default policy, its notes its own)."""
    current_ = _FALLBACKS.get()
    if current_ is None:
        current_ = CustomRuleFallbacks()
        _FALLBACKS.set(current_)
    return current_


def set_custom_rule_policy(policy: str) -> None:
    """`--custom-rules`: the policy for the rest of this context (a command), notes empty."""
    _FALLBACKS.set(CustomRuleFallbacks(policy))


@contextlib.contextmanager
def custom_rule_policy(policy: str) -> Iterator[CustomRuleFallbacks]:
    """`policy` for the block (an API call), notes empty; the one before restored after."""
    token = _FALLBACKS.set(CustomRuleFallbacks(policy))
    try:
        yield _FALLBACKS.get()
    finally:
        _FALLBACKS.reset(token)


def entry_invocation(remat=None, plans: list | None = None) -> Invocation:
    """The invocation of a walk started outside any other: the request given, the policy
    of this command or API call."""
    return Invocation(remat, plans, custom_rule_fallbacks())
