"""What the AD transformations refuse to take, checked before they start."""

from __future__ import annotations


def require_transformable(jaxpr) -> None:
    """Refuse what the transformations cannot take: a program over named axes.  Symbolic
    dims (`f32[b,3]`), sharded ones (`f32[8@x]`) and both (`f32[2*b@x]`) are transformed,
    and an equation whose rule does not handle them is refused at that equation
    (`registry.located_rule`, `builder.infer`)."""
    from ..core import named_axes_refusal

    err = named_axes_refusal(jaxpr, "differentiating")
    if err is not None:
        raise err
