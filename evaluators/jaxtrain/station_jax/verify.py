"""What an exported apply function may hold before the station runs it on scored inputs.

The training run hands over its network as a `jax.export` artifact (StableHLO): a computation
the station can run without any of the submission's Python. It must be a pure function of its
arguments (the parameters and one example), so the station refuses, in one line:
- host callbacks and any other `custom_call` outside ALLOWED_CUSTOM_CALLS (a callback would run
  code in the scoring process; other targets are native code we have not vetted);
- host communication and collectives (infeed, outfeed, send, recv, all-reduce, ...);
- any operation outside ALLOWED_OPS: StableHLO, the func structure and Shardy's sharding markers
  are all JAX's own exports hold once deserialized (the portable artifact lowers chlo and mhlo).
  An artifact may also be plain MLIR bytecode, which JAX reads as it is: there, mhlo.custom_call,
  chlo.constant or sdy.constant would pass a check written for StableHLO, so they are refused;
- side effects JAX records (ordered or unordered effects), disabled safety checks;
- more than MAX_EMBEDDED_CONSTANT_BYTES of data in the module's attributes: what a network
  learnt belongs in its checkpoint, which the station caps and counts; a big table inside the
  code is refused rather than argued about. Every attribute of every operation counts (a
  constant's value, a dense_resource blob, dense arrays), whatever the op; a splat (one value
  broadcast to a shape, as jax.random writes its round constants) counts as the one value it
  stores, so an honest large random draw inside apply passes;
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

import math
from typing import Any

MAX_EMBEDDED_CONSTANT_BYTES = 1 << 20  # 1 MiB over all constants of the module
SHARDING_MARKERS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
# What JAX's own exports hold once deserialized (the portable artifact lowers chlo and mhlo to
# StableHLO; Shardy keeps its sharding markers): any other operation is refused by name, so that
# no dialect the parser knows (mhlo.custom_call, chlo.constant, sdy collectives) gets past a check
# written for StableHLO.
ALLOWED_OPS = {
    "stablehlo": None,  # every operation but DENIED_OPS
    "func": frozenset({"func", "call", "return"}),
    "builtin": frozenset({"module"}),
    "sdy": frozenset(
        {
            "mesh",
            "sharding_constraint",
            "manual_computation",
            "named_computation",
            "return",
            "reshard",
            "sharding_group",
        }
    ),
}
CONSTANT_OPS = frozenset({"stablehlo.constant"})  # the only op whose attribute is its result
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
    """Walk every operation of the module: its name (ALLOWED_OPS), custom calls, and the bytes that
    each of its attributes stores, summed over the module (MAX_EMBEDDED_CONSTANT_BYTES)."""
    from jax._src.lib.mlir import ir

    allowed = allowed_custom_calls()
    problems: list[str] = []
    stored = 0

    def visit(op: Any) -> Any:
        nonlocal stored
        try:
            why = refusal(op, allowed)
            stored += 0 if why else attribute_bytes(op)
        except Refused as err:
            why = str(err)
        except Exception as err:  # noqa: BLE001 - nothing may cross MLIR's walk (it aborts), and any odd op is refused
            why = f"one of its operations could not be read ({type(err).__name__}: {err})"
        if why:
            problems.append(why)
        return ir.WalkResult.INTERRUPT if problems else ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if problems:
        raise Refused(f"the exported apply function was refused: {problems[0]}")
    if stored > MAX_EMBEDDED_CONSTANT_BYTES:
        raise Refused(
            f"the exported apply function embeds {stored:,} bytes of constants, more than "
            f"{MAX_EMBEDDED_CONSTANT_BYTES:,}: learnt values belong in the parameters"
        )


def refusal(op: Any, allowed_calls: frozenset[str]) -> str | None:
    """Why the station does not run this operation, or None."""
    from jax._src.lib.mlir import ir

    name = op.name
    dialect, _, short = name.partition(".")
    known = ALLOWED_OPS.get(dialect, frozenset())
    if name in DENIED_OPS or (known is not None and short not in known):
        return f"it holds the operation {name}, which the station does not run"
    if name == "stablehlo.custom_call":
        target = ir.StringAttr(op.attributes["call_target_name"]).value
        if target not in allowed_calls:
            what = "a host callback" if "callback" in target else "a custom call"
            return f"it holds {what} ({target}); only plain JAX operations are allowed"
    return None


def attribute_bytes(op: Any) -> int:
    """What the attributes of `op` store: the data of every elements attribute (a constant's value,
    a dense_resource blob, one on any other op), a splat counted as its one value, and dense arrays."""
    from jax._src.lib.mlir import ir

    attributes = op.attributes
    total = 0
    for name in [attributes[i].name for i in range(len(attributes))]:
        try:
            attribute = attributes[name]  # by name: read by position, this one aborts the process
        except TypeError:  # a dense complex array, which MLIR's Python bindings cannot hand over
            if op.name not in CONSTANT_OPS:
                raise Refused(f"its operation {op.name} holds an attribute the station cannot read") from None
            kinds = [ir.ShapedType(result.type) for result in op.results]
            return sum(elements(kind) * element_bytes(kind.element_type) for kind in kinds)  # by its type
        total += stored_bytes(attribute)
    return total


def stored_bytes(attribute: Any) -> int:
    """The bytes of data one attribute stores (nested ones included); 0 for names, flags, types."""
    from jax._src.lib.mlir import ir

    attribute = attribute.maybe_downcast()
    if isinstance(attribute, ir.ArrayAttr):
        return sum(stored_bytes(item) for item in attribute)
    if isinstance(attribute, ir.DictAttr):
        return sum(stored_bytes(attribute[key]) for key in [attribute[i].name for i in range(len(attribute))])
    width = DENSE_ARRAY_BYTES.get(type(attribute).__name__)
    if width is not None:
        return len(attribute) * width
    kind = attribute.type.maybe_downcast()
    if not isinstance(kind, ir.ShapedType):
        return 0
    splat = isinstance(attribute, ir.DenseElementsAttr) and attribute.is_splat
    return (1 if splat else elements(kind)) * element_bytes(kind.element_type)


DENSE_ARRAY_BYTES = {"DenseBoolArrayAttr": 1, "DenseI8ArrayAttr": 1, "DenseI16ArrayAttr": 2, "DenseI32ArrayAttr": 4}
DENSE_ARRAY_BYTES |= {"DenseI64ArrayAttr": 8, "DenseF32ArrayAttr": 4, "DenseF64ArrayAttr": 8}


def elements(kind: Any) -> int:
    if not kind.has_static_shape:
        raise Refused("one of its attributes has no static shape")
    return math.prod(kind.shape)  # Python's integers: no shape can wrap the count around


def element_bytes(element: Any) -> int:
    from jax._src.lib.mlir import ir

    element = element.maybe_downcast()
    if isinstance(element, ir.ComplexType):
        return 2 * element_bytes(element.element_type)
    width = getattr(element, "width", None)  # integers and floats; index and others: 8 bytes
    return 8 if width is None else max(1, (width + 7) // 8)
