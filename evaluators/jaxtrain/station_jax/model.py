"""Calling the agent's network the same way in every trial: Flax modules and plain objects.

A network has `init(rng, x)` and `apply(variables, x, training=...)`. Flax layouts
(`{"params": ..., "batch_stats": ...}`) are recognised: only `params` is trained, the other
collections are updated through `mutable` in training mode, and a `dropout` RNG is passed.
A network may also say so itself with the attributes `mutable` (list of collections) and
`needs_rng` (bool), as the task spec allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hooks import ContractError


class Model:
    def __init__(self, network: Any) -> None:
        if not callable(getattr(network, "init", None)) or not callable(getattr(network, "apply", None)):
            raise ContractError(
                "create_network(hparams) must return an object with init(rng, x) and "
                f"apply(params, x, training=...), got {type(network).__name__}"
            )
        self.network = network
        self.flax = _is_flax(network)
        self.mutable: list[str] = list(getattr(network, "mutable", None) or [])
        self.needs_rng = bool(getattr(network, "needs_rng", False)) or self.flax

    def init(self, key, *inputs, jit: bool = False) -> Any:
        """The network's variables. `jit`: initialised as one compiled computation (`compiled`:
        the same values, one compilation instead of one per operation)."""
        import jax

        init = compiled if jit else (lambda fn, *args: fn(*args))
        if self.flax:
            params_key, dropout_key = jax.random.split(key)
            variables = init(self.network.init, {"params": params_key, "dropout": dropout_key}, *inputs)
        else:
            variables = init(self.network.init, key, *inputs)
        if self.flax_layout(variables) and not self.mutable:
            self.mutable = sorted(k for k in variables if k != "params")
        return variables

    @staticmethod
    def flax_layout(variables: Any) -> bool:
        return isinstance(variables, dict) and "params" in variables

    def split(self, variables: Any) -> tuple[Any, Any]:
        """(trained part, the rest): only `params` is trained in the Flax layout."""
        if self.flax_layout(variables):
            return variables["params"], {k: v for k, v in variables.items() if k != "params"}
        return variables, None

    def join(self, trained: Any, rest: Any) -> Any:
        return {"params": trained, **rest} if rest is not None else trained

    def apply(self, variables: Any, *inputs, training: bool | None = None, rng=None, **kw) -> tuple[Any, Any]:
        """(outputs, updated non-trained collections or None). `training=None`: the task's
        network takes no training flag (Sokoban's apply(params, obs, done, rnn_state))."""
        extra = dict(kw)
        if training is not None:
            extra["training"] = training
        if training and self.needs_rng and rng is not None:
            extra["rngs"] = {"dropout": rng}
        if training and self.mutable:
            out, updates = self.network.apply(variables, *inputs, mutable=self.mutable, **extra)
            return out, dict(updates)
        return self.network.apply(variables, *inputs, **extra), None


def compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) as one compiled computation, the same values as operation by operation: on the
    CPU each operation run outside jit is compiled on its own, and a trial's setup (a network's
    init, an optimizer's state, a first call) was tens to hundreds of small compilations, most of
    a short trial's CPU. What cannot be traced (the submission's code may do anything) runs
    operation by operation as before, where it fails, if it fails, with the error it always had;
    its Python side effects may then run twice."""
    import jax

    try:
        return jax.jit(fn)(*args)
    except ContractError:
        raise
    except Exception:  # noqa: BLE001 - run again below, eagerly, where it fails as it always did
        return fn(*args)


def shape_of(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args)'s shape and dtype (traced, not compiled or run: a check that needs only the shape
    of an output); what cannot be traced is called as before."""
    import jax

    try:
        return jax.eval_shape(fn, *args)
    except ContractError:
        raise
    except Exception:  # noqa: BLE001 - called below, where it fails (or not) as it always did
        return fn(*args)


def _is_flax(network: Any) -> bool:
    try:
        import flax.linen as nn
    except ImportError:
        return False
    return isinstance(network, nn.Module)


def count_parameters(tree: Any) -> int:
    import jax

    return int(sum(getattr(leaf, "size", 0) for leaf in jax.tree_util.tree_leaves(tree)))
