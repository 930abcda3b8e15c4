"""What an exported apply function may hold before the station runs it on scored inputs.

The training run hands over its network as a `jax.export` artifact (StableHLO): a computation
the station can run without any of the submission's Python. It must be a pure function of its
arguments (the parameters and one example), so the station refuses, in one line:
- host callbacks and any other `custom_call` outside ALLOWED_CUSTOM_CALLS (a callback would run
  code in the scoring process; other targets are native code we have not vetted);
- host communication and collectives (infeed, outfeed, send, recv, all-reduce, ...);
- side effects JAX records (ordered or unordered effects), disabled safety checks;
- more than MAX_EMBEDDED_CONSTANT_BYTES of constants embedded in the module: what a network
  learnt belongs in its checkpoint, which the station caps and counts; a big table inside the
  code is refused rather than argued about;
- other platforms than the CPU, more than one device, and argument or result shapes other than
  the task's example and output.

Which custom calls plain JAX needs was found by exporting common layers on the CPU (dense,
convolution, normalisation, GELU, dropout, scan, sort, top_k, cumsum, FFT, jax.random, argmax):
none; `jnp.linalg` (inv, solve, eigh, svd, qr, cholesky) calls LAPACK through `lapack_*_ffi`
kernels, which JAX itself lists as stable. Those, and the sharding markers JAX writes around
sharding constraints, are all that is allowed.

Runs in the scoring sandbox (station_jax/scoring.py), never in the station's own process: the
artifact is parsed by MLIR's native parser, which is no place for an attacker's bytes.
Imports jax inside functions only.
"""

from __future__ import annotations

from typing import Any

MAX_EMBEDDED_CONSTANT_BYTES = 1 << 20  # 1 MiB over all constants of the module
SHARDING_MARKERS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
DIALECTS = frozenset({"stablehlo", "chlo", "func", "sdy", "mhlo", "builtin"})
DENIED_OPS = frozenset(
    f"stablehlo.{name}"
    for name in (
        "infeed",
        "outfeed",
        "send",
        "recv",
        "all_reduce",
        "all_gather",
        "all_to_all",
        "reduce_scatter",
        "collective_permute",
        "collective_broadcast",
        "partition_id",
        "replica_id",
    )
)


class Refused(Exception):
    """The exported function breaks the contract (one line, shown to the author)."""


def allowed_custom_calls() -> frozenset[str]:
    """LAPACK kernels on the CPU (as JAX lists them) and the sharding markers."""
    from jax._src.export import _export

    lapack = {name for name in _export._CPU_FFI_KERNELS if name.startswith("lapack_")}
    return frozenset(lapack) | SHARDING_MARKERS


def check_exported(
    exp: Any, inputs: list[tuple[tuple[int, ...], str]], outputs: list[tuple[tuple[int, ...], str]]
) -> None:
    """Raise Refused unless `exp` (a jax.export.Exported) is a pure CPU function whose last
    arguments are one example (`inputs`: shapes and dtypes) and whose results are `outputs`."""
    if tuple(exp.platforms) != ("cpu",):
        raise Refused(f"the apply function was exported for {list(exp.platforms)}; the station needs ['cpu']")
    if exp.nr_devices != 1:
        raise Refused(f"the apply function was exported for {exp.nr_devices} devices; the station needs 1")
    if exp.ordered_effects or exp.unordered_effects:
        raise Refused("the apply function has side effects (a callback or a print); it must be pure")
    if exp.disabled_safety_checks:
        raise Refused("the apply function was exported with JAX's safety checks disabled")
    import jax

    if exp.in_tree != jax.tree_util.tree_structure((tuple(range(len(exp.in_avals))), {})):
        raise Refused("the apply function must take the parameters and the example as positional arrays")
    avals = [(tuple(a.shape), str(a.dtype)) for a in exp.in_avals]
    wanted = [(tuple(shape), str(dtype)) for shape, dtype in inputs]
    if len(avals) < len(wanted) or avals[len(avals) - len(wanted) :] != wanted:
        raise Refused(f"the apply function's example arguments are {avals[-len(wanted) :]}, expected {wanted}")
    results = [(tuple(a.shape), str(a.dtype)) for a in exp.out_avals]
    expected = [(tuple(shape), str(dtype)) for shape, dtype in outputs]
    if results != expected:
        raise Refused(f"the apply function returns {results}, expected {expected}")
    from jax._src.interpreters import mlir

    with mlir.make_ir_context():  # the module lives in this context
        check_module(exp.mlir_module(serialized=False))


def check_module(module: Any) -> None:
    """Walk every operation of the (StableHLO) module: dialects, denied ops, custom calls, constants."""
    import numpy as np
    from jax._src.lib.mlir import ir

    allowed = allowed_custom_calls()
    problems: list[str] = []
    constant_bytes = 0

    def visit(op: Any) -> Any:
        nonlocal constant_bytes
        name = op.name
        if name.split(".", 1)[0] not in DIALECTS or name in DENIED_OPS:
            problems.append(f"it holds the operation {name}, which the station does not run")
        elif name == "stablehlo.custom_call":
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            if target not in allowed:
                what = "a host callback" if "callback" in target else "a custom call"
                problems.append(f"it holds {what} ({target}); only plain JAX operations are allowed")
        elif name == "stablehlo.constant":
            for result in op.results:
                kind = ir.ShapedType(result.type)
                bits = getattr(kind.element_type.maybe_downcast(), "width", 64)  # complex: counted as 64
                constant_bytes += int(np.prod(kind.shape, dtype=np.int64)) * max(1, bits // 8)
        return ir.WalkResult.ADVANCE if not problems else ir.WalkResult.INTERRUPT

    module.operation.walk(visit)
    if problems:
        raise Refused(f"the exported apply function was refused: {problems[0]}")
    if constant_bytes > MAX_EMBEDDED_CONSTANT_BYTES:
        raise Refused(
            f"the exported apply function embeds {constant_bytes:,} bytes of constants, more than "
            f"{MAX_EMBEDDED_CONSTANT_BYTES:,}: learnt values belong in the parameters"
        )
