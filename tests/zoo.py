"""The zoo: real programs written with the JAX ecosystem's libraries (Flax linen and nnx, optax,
Equinox, diffrax, jax.scipy), each as a function of flat array arguments so that JAX's printed
jaxpr and the function take the same inputs.  Shared by tests/test_zoo.py and
bench/zoo_counts.py.

Each `Program` is `fn(*leaves) -> outputs` with its float-or-integer input arrays; `argnums` are
the inputs differentiated (the float ones that are parameters or data, never an integer label or
a PRNG key's data); `has_aux`: `fn` returns (loss, aux...) and grad differentiates the first
output only.  Sizes are small: the whole zoo traces in a few seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


@dataclass
class Program:
    name: str
    fn: Callable
    args: list  # numpy arrays (a PRNG key input as its uint32 key data: see `key_inputs`)
    argnums: tuple[int, ...]
    has_aux: bool = False
    key_inputs: tuple[int, ...] = ()  # inputs that are typed PRNG keys inside `fn`
    forward_mode: bool = True  # False: a custom_vjp inside, jax.jvp refuses the program

    def jax_args(self):
        """The arguments as JAX takes them (key data wrapped into typed keys)."""
        return [
            jax.random.wrap_key_data(a) if i in self.key_inputs else jnp.asarray(a)
            for i, a in enumerate(self.args)
        ]


def have(*packages: str) -> bool:
    return all(importlib.util.find_spec(p) is not None for p in packages)


def _flat(fn, tree_args):
    """fn over a pytree of arguments -> (fn over the flat leaves, the leaves as numpy arrays)."""
    leaves, tree = jax.tree_util.tree_flatten(tree_args)
    return (lambda *flat: fn(*jax.tree_util.tree_unflatten(tree, flat))), [
        np.asarray(x) for x in leaves
    ]


def _rng(seed):
    return np.random.default_rng(seed)


def _images(shape, seed):
    return _rng(seed).uniform(0.0, 1.0, shape).astype(np.float32)


def _labels(n, classes, seed):
    return _rng(seed).integers(0, classes, n).astype(np.int32)


def _xent(logits, labels):
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


BUILDERS: dict[str, Callable[[], Program]] = {}
NEEDS: dict[str, tuple[str, ...]] = {}  # the packages each program imports


def _zoo(name, needs):
    def register(builder):
        BUILDERS[name], NEEDS[name] = builder, needs
        return builder

    return register


def _program(name, fn, tree_args, n_diff, **kw):
    """Program over flat leaves; the first `n_diff` pytree arguments are differentiated."""
    flat_fn, leaves = _flat(fn, tree_args)
    n = len(jax.tree_util.tree_leaves(tree_args[:n_diff]))
    return Program(name, flat_fn, leaves, tuple(range(n)), **kw)


# ------------------------------------------------------------------ Flax linen


@_zoo("flax_cnn", ("flax",))
def flax_cnn():
    """A Flax linen CNN on MNIST-shaped images: conv (SAME and explicit padding), jax.nn.relu,
    avg_pool, dense, cross-entropy."""
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jax.nn.relu(nn.Conv(4, (3, 3), padding="SAME")(x))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = jax.nn.relu(nn.Conv(4, (3, 3), padding=((1, 1), (1, 1)))(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    x, y = _images((2, 28, 28, 1), 0), _labels(2, 10, 1)
    model = CNN()
    params = model.init(jax.random.key(0), x)

    def loss(params, x, y):
        return _xent(model.apply(params, x), y)

    return _program("flax_cnn", loss, (params, x, y), 1)


@_zoo("flax_resnet_block", ("flax",))
def flax_resnet_block():
    """A ResNet block with BatchNorm in training mode: the loss, and the updated batch
    statistics as auxiliary outputs."""
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(4, (3, 3), use_bias=False)(x)
            h = nn.relu(nn.BatchNorm(use_running_average=False)(h))
            h = nn.Conv(4, (3, 3), use_bias=False)(h)
            h = nn.BatchNorm(use_running_average=False, scale_init=nn.initializers.ones)(h)
            return nn.relu(h + x)

    x = _images((2, 6, 6, 4), 2)
    model = Block()
    variables = model.init(jax.random.key(1), x)
    params, stats = variables["params"], variables["batch_stats"]

    def loss(params, stats, x):
        out, updates = model.apply(
            {"params": params, "batch_stats": stats}, x, mutable=["batch_stats"]
        )
        return (jnp.mean(out**2), *jax.tree_util.tree_leaves(updates))

    return _program("flax_resnet_block", loss, (params, stats, x), 1, has_aux=True)


@_zoo("flax_gpt", ("flax",))
def flax_gpt():
    """A small GPT decoder: token and position embeddings with dropout (its PRNG key an explicit
    input), a pre-norm block of causal self-attention and a gelu MLP, next-token cross-entropy.
    One dropout only: each threefry `random_bits` costs XLA seconds to compile."""
    import flax.linen as nn

    vocab, d, t = 11, 8, 5

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
            x = x + nn.SelfAttention(num_heads=2)(nn.LayerNorm()(x), mask)
            h = nn.Dense(2 * d)(nn.LayerNorm()(x))
            return x + nn.Dense(d)(nn.gelu(h))

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, tokens, train):
            pos = self.param("pos", nn.initializers.normal(0.02), (t, d))
            x = nn.Dropout(0.1, deterministic=not train)(nn.Embed(vocab, d)(tokens) + pos)
            return nn.Dense(vocab)(nn.LayerNorm()(Block()(x)))

    tokens = _rng(3).integers(0, vocab, (2, t)).astype(np.int32)
    model = GPT()
    params = model.init(jax.random.key(2), tokens, False)
    key = np.asarray(jax.random.key_data(jax.random.key(7)))

    def loss(params, tokens, key):
        logits = model.apply(params, tokens, True, rngs={"dropout": key})
        return _xent(logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))

    p = _program("flax_gpt", loss, (params, tokens, key), 1)
    p.key_inputs = (len(p.args) - 1,)
    return p


@_zoo("flax_lstm", ("flax",))
def flax_lstm():
    """An LSTM over a sequence with nn.RNN (flax's nn.scan over an LSTMCell), a dense head."""
    import flax.linen as nn

    class Model(nn.Module):
        @nn.compact
        def __call__(self, xs):
            h = nn.RNN(nn.LSTMCell(6))(xs)
            return nn.Dense(1)(h[:, -1])

    xs, ys = _images((2, 7, 3), 4), _images((2, 1), 5)
    model = Model()
    params = model.init(jax.random.key(3), xs)

    def loss(params, xs, ys):
        return jnp.mean((model.apply(params, xs) - ys) ** 2)

    return _program("flax_lstm", loss, (params, xs, ys), 1)


@_zoo("nnx_mlp", ("flax",))
def nnx_mlp():
    """A Flax nnx MLP with LayerNorm and gelu, split into its state for a pure function."""
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(5, 8, rngs=rngs)
            self.norm = nnx.LayerNorm(8, rngs=rngs)
            self.l2 = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, x):
            return self.l2(nnx.gelu(self.norm(self.l1(x))))

    graphdef, state = nnx.split(MLP(nnx.Rngs(4)))
    x, y = _images((4, 5), 6), _images((4, 3), 7)

    def loss(state, x, y):
        return jnp.mean((nnx.merge(graphdef, state)(x) - y) ** 2)

    return _program("nnx_mlp", loss, (state, x, y), 1)


# ------------------------------------------------------------------ optax


@_zoo("optax_adamw", ("optax",))
def optax_adamw_step():
    """One optax adamw training step of a small MLP: the loss, its gradient, the update; the
    loss is differentiated, the new parameters and optimiser state are auxiliary outputs."""
    import optax

    k1, k2 = jax.random.split(jax.random.key(5))
    params = {
        "w1": 0.3 * jax.random.normal(k1, (4, 6)),
        "b1": jnp.zeros(6),
        "w2": 0.3 * jax.random.normal(k2, (6, 2)),
    }
    opt = optax.adamw(1e-2, weight_decay=1e-3)
    state = opt.init(params)
    x, y = _images((5, 4), 8), _images((5, 2), 9)

    def model_loss(params, x, y):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] - y) ** 2)

    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(model_loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        return (loss, *jax.tree_util.tree_leaves((params, state)))

    return _program("optax_adamw", step, (params, state, x, y), 1, has_aux=True)


# ------------------------------------------------------------------ Equinox, diffrax


@_zoo("eqx_mlp", ("equinox",))
def eqx_mlp():
    import equinox as eqx

    mlp = eqx.nn.MLP(3, 2, 8, 2, activation=jax.nn.softplus, key=jax.random.key(6))
    params, static = eqx.partition(mlp, eqx.is_array)
    x, y = _images((4, 3), 10), _images((4, 2), 11)

    def loss(params, x, y):
        model = eqx.combine(params, static)
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    return _program("eqx_mlp", loss, (params, x, y), 1)


@_zoo("eqx_cnn", ("equinox",))
def eqx_cnn():
    import equinox as eqx

    k1, k2 = jax.random.split(jax.random.key(7))
    cnn = eqx.nn.Sequential(
        [
            eqx.nn.Conv2d(1, 3, 3, padding=1, key=k1),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.MaxPool2d(2, 2),
            eqx.nn.Lambda(jnp.ravel),
            eqx.nn.Linear(3 * 4 * 4, 10, key=k2),
        ]
    )
    params, static = eqx.partition(cnn, eqx.is_array)
    x, y = _images((2, 1, 8, 8), 12), _labels(2, 10, 13)

    def loss(params, x, y):
        model = eqx.combine(params, static)
        return _xent(jax.vmap(model)(x), y)

    return _program("eqx_cnn", loss, (params, x, y), 1)


@contextlib.contextmanager
def _equinox_errors_as_nan():
    """EQX_ON_ERROR=nan while tracing: error checks become NaNs, not a pure_callback.  Equinox
    reads the variable when it is imported, so the module's value is set too."""
    import equinox._errors as errors

    saved = os.environ.get("EQX_ON_ERROR"), errors.EQX_ON_ERROR
    os.environ["EQX_ON_ERROR"], errors.EQX_ON_ERROR = "nan", "nan"
    try:
        yield
    finally:
        if saved[0] is None:
            del os.environ["EQX_ON_ERROR"]
        else:
            os.environ["EQX_ON_ERROR"] = saved[0]
        errors.EQX_ON_ERROR = saved[1]


@_zoo("diffrax_ode", ("diffrax", "equinox"))
def diffrax_ode():
    """A diffrax solve of a small linear-plus-tanh ODE with Tsit5 and a fixed step size."""
    import diffrax

    def solve(a, y0):
        term = diffrax.ODETerm(lambda t, y, a: jnp.tanh(a @ y))
        sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.25, y0, args=a)
        return jnp.sum(sol.ys[-1] ** 2)

    a = (0.5 * _rng(14).standard_normal((3, 3))).astype(np.float32)
    y0 = _images((3,), 15)
    return Program("diffrax_ode", solve, [a, y0], (0, 1), forward_mode=False)


# ------------------------------------------------------------------ jax.scipy


@_zoo("gp_nll", ())
def gp_nll():
    """A Gaussian-process negative log-likelihood: RBF kernel, cholesky, solve_triangular."""
    from jax.scipy.linalg import solve_triangular

    def nll(log_ls, log_noise, x, y):
        d2 = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, -1)
        k = jnp.exp(-0.5 * d2 / jnp.exp(2 * log_ls)) + jnp.exp(log_noise) * jnp.eye(x.shape[0])
        low = jnp.linalg.cholesky(k)
        alpha = solve_triangular(low, y, lower=True)
        return 0.5 * jnp.sum(alpha**2) + jnp.sum(jnp.log(jnp.diag(low)))

    x, y = _images((6, 2), 16), _images((6,), 17)
    return Program("gp_nll", nll, [np.float32(-0.3), np.float32(-2.0), x, y], (0, 1, 2, 3))


@_zoo("ridge_solve", ())
def ridge_solve():
    """Ridge regression in closed form with jnp.linalg.solve (lu and custom_linear_solve), its
    validation error as the loss of the log-penalty."""

    def loss(log_lam, x, y, xv, yv):
        a = x.T @ x + jnp.exp(log_lam) * jnp.eye(x.shape[1])
        w = jnp.linalg.solve(a, x.T @ y)
        return jnp.mean((xv @ w - yv) ** 2)

    x, y, xv, yv = _images((6, 3), 19), _images((6,), 20), _images((4, 3), 21), _images((4,), 22)
    return Program("ridge_solve", loss, [np.float32(0.1), x, y, xv, yv], (0, 1, 2))


@_zoo("expm", ())
def expm():
    """jax.scipy.linalg.expm of a small matrix, squared and summed."""
    from jax.scipy.linalg import expm as _expm

    a = (0.3 * _rng(18).standard_normal((3, 3))).astype(np.float32)
    return Program("expm", lambda a: jnp.sum(_expm(a) ** 2), [a], (0,))


NAMES = list(BUILDERS)


def trace(program: Program) -> str:
    """JAX's printed jaxpr of the program on its arguments."""
    return str(jax.make_jaxpr(program.fn)(*program.jax_args()))


def build(name: str) -> Program:
    """The named program (its packages must be installed: see `have`)."""
    builder = BUILDERS[name]
    if "equinox" not in NEEDS[name]:
        return builder()
    with _equinox_errors_as_nan():
        program = builder()
    fn = program.fn

    def traced_with_nan_errors(*args):
        with _equinox_errors_as_nan():
            return fn(*args)

    program.fn = traced_with_nan_errors
    return program
