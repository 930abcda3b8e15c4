"""Red team: what an exported apply function may hold, and how long the station runs it.

A training run hands the station its network as a `jax.export` artifact; the scoring sandbox
checks it (evaluators/jaxtrain/station_jax/verify.py) before it runs it on the scored inputs.
The attacks here are forged artifacts: a module parsed from MLIR text and stored as plain MLIR
bytecode (which JAX's deserializer accepts as it is), so that any dialect the parser knows can
carry data or effects past a check that knows StableHLO only:
- 2 MiB of constants in each dialect's constant op (stablehlo, chlo, mhlo, sdy), in a
  dense_resource blob, or in any attribute of any op: refused;
- operations of other dialects that compute or talk (mhlo.custom_call with any target, mhlo
  tokens, an sdy collective, chlo.constant_like, func.constant): refused by name;
- an attribute MLIR's Python bindings cannot hand over (a dense complex array): refused in one
  line, where reading it by position aborted the scorer;
- honest code that draws a large random array or fills one with a value: its splat constants
  count one element each, so it is accepted.
And an export that spins: the scorer is stopped by the trial's own time limit plus a few seconds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from evaluators.jaxtrain.station_jax.verify import MAX_EMBEDDED_CONSTANT_BYTES, Refused, check_exported

N = MAX_EMBEDDED_CONSTANT_BYTES // 4 * 2 + 16  # 2 MiB of float32, and a little
VALUES = np.arange(N, dtype=np.float32)
HEX = "0x" + VALUES.tobytes().hex().upper()
SHAPES = [((4,), "float32")]  # one example and one output of 4 floats; one parameter of 4 floats too


def module_text(constant: str, resources: str = "") -> str:
    """A module whose main(p, x) returns x + p + c[8:12], c being what `constant` defines as %c."""
    return f"""module @jit_f attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32> {{jax.result_info = "result[0]"}}) {{
    {constant}
    %s = stablehlo.slice %c [8:12] : (tensor<{N}xf32>) -> tensor<4xf32>
    %0 = stablehlo.add %arg1, %arg0 : tensor<4xf32>
    %1 = stablehlo.add %0, %s : tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}
{resources}"""


def generic(op: str, value: str) -> str:
    return f'%c = "{op}"() {{value = {value} : tensor<{N}xf32>}} : () -> tensor<{N}xf32>'


DENSE = f'dense<"{HEX}">'
BLOB = "{-# dialect_resources: { builtin: { table: \"0x04000000" + HEX[2:] + "\" } } #-}"
FORGED = {  # name: (the constant %c, resources, what the refusal says)
    "stablehlo": (f"%c = stablehlo.constant {DENSE} : tensor<{N}xf32>", "", "bytes of constants"),
    "chlo": (generic("chlo.constant", DENSE), "", "chlo.constant"),
    "mhlo": (generic("mhlo.constant", DENSE), "", "mhlo.constant"),
    "sdy": (generic("sdy.constant", DENSE), "", "sdy.constant"),
    "stablehlo-resource": (f"%c = stablehlo.constant dense_resource<table> : tensor<{N}xf32>", BLOB, "bytes of constants"),
    "chlo-resource": (generic("chlo.constant", "dense_resource<table>"), BLOB, "chlo.constant"),
    # the same table beside the computation: an attribute of an ordinary op, a constant in a loop's body
    "attribute": (
        f"%c = stablehlo.iota dim = 0 {{station.junk = {DENSE} : tensor<{N}xf32>}} : tensor<{N}xf32>",
        "",
        "bytes of constants",
    ),
}


def forge(text: str):
    """A real export of f(p, x) = x + p whose module is replaced by `text`, as MLIR bytecode."""
    import jax
    import jax.numpy as jnp
    from jax import export
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    specs = [jax.ShapeDtypeStruct((4,), jnp.float32)] * 2
    plain = export.export(jax.jit(lambda p, x: (x + p,)), platforms=["cpu"])(*specs)
    with mlir.make_ir_context():
        raw = mlir.module_to_bytecode(ir.Module.parse(text))
    return export.deserialize(bytearray(dataclasses.replace(plain, mlir_module_serialized=raw).serialize()))


def check(exported) -> None:
    check_exported(exported, SHAPES, SHAPES)


def export_of(fn, *shapes):
    import jax
    import jax.numpy as jnp
    from jax import export

    return export.export(jax.jit(fn), platforms=["cpu"])(*[jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes])


@pytest.mark.parametrize("name", FORGED)
def test_two_mib_of_constants_in_any_dialect_are_refused(name: str) -> None:
    constant, resources, why = FORGED[name]
    forged = forge(module_text(constant, resources))
    if name in ("stablehlo", "chlo", "mhlo", "sdy"):  # the forgery is real: JAX runs it as it is
        import jax.numpy as jnp

        (out,) = forged.call(jnp.ones(4), jnp.ones(4))
        assert np.asarray(out).tolist() == (2 + VALUES[8:12]).tolist()
    with pytest.raises(Refused, match=why):
        check(forged)


@pytest.mark.parametrize("junk", ["{c}", "[{c}]", "{{k = {c}}}"])
def test_an_attribute_the_bindings_cannot_read_is_refused_not_fatal(junk: str) -> None:
    """A dense complex array on an ordinary op: MLIR's Python bindings cannot hand it over (read
    by position, they abort the process). The check reads by name and refuses it in one line."""
    junk = junk.format(c="dense<(1.0,2.0)> : tensor<3xcomplex<f32>>")
    text = module_text(f"%c = stablehlo.iota dim = 0 {{station.junk = {junk}}} : tensor<{N}xf32>")
    with pytest.raises(Refused, match="stablehlo.iota holds an attribute the station cannot read|could not be read"):
        check(forge(text))


def test_constants_spread_over_small_ones_and_loop_bodies_add_up() -> None:
    third = N // 3 + 1
    table = f'dense<"0x{VALUES[:third].tobytes().hex()}"> : tensor<{third}xf32>'
    text = f"""module @jit_f {{
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {{
    %a = stablehlo.constant {table}
    %b = stablehlo.constant {table}
    %w:2 = stablehlo.while(%i = %arg0, %j = %arg1) : tensor<4xf32>, tensor<4xf32>
      cond {{
        %t = stablehlo.constant dense<false> : tensor<i1>
        stablehlo.return %t : tensor<i1>
      }} do {{
        %c = stablehlo.constant {table}
        %k = stablehlo.slice %c [0:4] : (tensor<{third}xf32>) -> tensor<4xf32>
        stablehlo.return %k, %j : tensor<4xf32>, tensor<4xf32>
      }}
    %x = stablehlo.slice %a [0:4] : (tensor<{third}xf32>) -> tensor<4xf32>
    %y = stablehlo.slice %b [4:8] : (tensor<{third}xf32>) -> tensor<4xf32>
    %0 = stablehlo.add %x, %y : tensor<4xf32>
    %1 = stablehlo.add %0, %w#0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}"""
    with pytest.raises(Refused, match="bytes of constants"):
        check(forge(text))


OUTSIDE = {  # id: (an operation defining %q, its name)
    "mhlo-callback": (
        '%q = "mhlo.custom_call"(%arg1) {call_target_name = "xla_ffi_python_cpu_callback"} : (tensor<4xf32>) -> tensor<4xf32>',
        "mhlo.custom_call",
    ),
    "mhlo-lapack": (
        '%q = "mhlo.custom_call"(%arg1) {call_target_name = "lapack_sgetrf_ffi"} : (tensor<4xf32>) -> tensor<4xf32>',
        "mhlo.custom_call",
    ),
    "mhlo-token": ('%q = "mhlo.create_token"() : () -> !mhlo.token', "mhlo.create_token"),
    "mhlo-copy": ('%q = "mhlo.copy"(%arg1) : (tensor<4xf32>) -> tensor<4xf32>', "mhlo.copy"),
    "sdy-collective": ("%q = sdy.all_reduce {} %arg1 out_sharding=<@mesh, [{}]> : tensor<4xf32>", "sdy.all_reduce"),
    "chlo-constant-like": (
        '%q = "chlo.constant_like"(%arg1) {value = 1.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>',
        "chlo.constant_like",
    ),
    "func-constant": ("%q = func.constant @main : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>", "func.constant"),
}


@pytest.mark.parametrize("name", OUTSIDE)
def test_operations_outside_stablehlo_are_refused(name: str) -> None:
    """JAX's own exports hold StableHLO, func and Shardy's sharding markers only (the portable
    artifact lowers the rest); an operation of mhlo or chlo, a Shardy collective or a function
    constant is refused by name, whatever it computes (mhlo.custom_call passed the check that
    knew stablehlo.custom_call only, with any target)."""
    op, refused = OUTSIDE[name]
    text = module_text(f"{op}\n    %c = stablehlo.iota dim = 0 : tensor<{N}xf32>")
    if "sdy." in op:
        text = text.replace("{\n  func.func", '{\n  sdy.mesh @mesh = <["a"=1]>\n  func.func', 1)
    with pytest.raises(Refused, match=f"the operation {refused}"):
        check(forge(text))


def test_a_large_splat_counts_one_element() -> None:
    """A value broadcast to 100 M elements stores one value: accepted (counted at its shape, it
    was "400,000,000 bytes of constants")."""
    text = module_text(f"%c = stablehlo.constant dense<1.5> : tensor<{N * 50}xf32>").replace(
        f"tensor<{N}xf32>) -> tensor<4xf32>", f"tensor<{N * 50}xf32>) -> tensor<4xf32>"
    )
    check(forge(text))


def test_honest_code_drawing_a_large_random_array_inside_apply_is_accepted() -> None:
    """jax.random inside apply writes its round constants as splats of the array's shape (JAX's
    threefry): 50 M draws were "4,600,000,112 bytes of constants" and refused."""
    import jax
    import jax.numpy as jnp

    def apply(p, x):
        noise = jax.random.normal(jax.random.key(0), (50_000_000,)).mean()
        return (x + p + noise + jnp.full((100_000_000,), 1.5).mean(),)

    check(export_of(apply, (4,), (4,)))


def test_honest_complex_and_small_constants_are_accepted() -> None:
    """A complex constant (which MLIR's Python bindings cannot hand over) and a 1,000-value
    table: counted by their type, accepted; a table of 2 MiB built the honest way is refused."""
    import jax.numpy as jnp

    table = np.linspace(0, 1, 1000, dtype=np.float32)
    rotation = np.exp(1j * np.arange(4)).astype(np.complex64)

    def apply(p, x):
        turned = jnp.real(jnp.fft.ifft(jnp.fft.fft(x) * jnp.asarray(rotation)))
        return (turned + p + jnp.asarray(table)[:4],)

    check(export_of(apply, (4,), (4,)))
    with pytest.raises(Refused, match="bytes of constants"):
        check(export_of(lambda p, x: (x + p + jnp.asarray(VALUES)[:4],), (4,), (4,)))


def test_the_scorer_lives_the_trials_limit_plus_seconds_on_one_core(tmp_path) -> None:
    """The scorer's wall clock and CPU time are the trial's own limit plus SCORER_MARGIN_S
    (seconds), on one core (it was the limit plus 120 s)."""
    from evaluators.base import create_task
    from evaluators.jaxtrain.two_stage import SCORER_MARGIN_S, TrialWatch

    task = create_task("forecasting", {"size": "small", "trials": 1, "trial_budget_s": 15, "grace_s": 5})
    watch = TrialWatch(tmp_path / "t", task.stop_rule(0), lambda outputs: {}, max_checkpoint_bytes=1 << 20)
    scorer = task._scorer_spec(task.run_spec("", mounts=[], label="t"), 0, watch)
    assert task.timeout_s == 20.0 and SCORER_MARGIN_S <= 15
    assert scorer.timeout_s == task.timeout_s + SCORER_MARGIN_S
    assert scorer.cpu_seconds == math.ceil(scorer.timeout_s)  # one core's worth, never more


# -- through the real sandbox: the forecasting task, CPU, budgets in epochs ------------------------------
TINY = {"size": "small", "trials": 1, "trial_budget_s": 600, "max_epochs": 2, "patience": 2, "grace_s": 120}
SUBMISSION = '''import dataclasses
import jax, jax.numpy as jnp
import flax.linen as nn
import station_jax.forecast as h
from station_jax.exchange import export_one
from station_jax.windows import CONTEXT


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        return jnp.swapaxes(nn.Dense(32)(jnp.swapaxes(x, 1, 2)), 1, 2)


def create_network(hparams):
    return Linear()
'''
CHLO_TABLE = SUBMISSION + '''

def forged(model, variables, n_neurons):
    """An export whose module answers from a 2 MiB table held by chlo.constant (MLIR bytecode)."""
    from jax import export
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    leaves = jax.tree_util.tree_leaves(variables)
    specs = [jax.ShapeDtypeStruct(l.shape, l.dtype) for l in leaves]
    specs.append(jax.ShapeDtypeStruct((CONTEXT, n_neurons), jnp.float32))
    def honest_looking(*args):  # every argument used: the export keeps them all, as the forged module does
        return (jnp.zeros((32, n_neurons)) + sum(0 * a.sum() for a in args),)

    plain = export.export(jax.jit(honest_looking), platforms=["cpu"])(*specs)
    args = ", ".join(f"%a{i}: tensor<{'x'.join(map(str, s.shape)) + 'x' if s.shape else ''}f32>" for i, s in enumerate(specs))
    out = f"tensor<32x{n_neurons}xf32>"
    n = 600_000
    table = "0x" + (b"\\x00\\x00\\x80\\x3f" * n).hex()
    text = f"""module @jit_forged {{
  func.func public @main({args}) -> ({out} {{jax.result_info = "result[0]"}}) {{
    %c = "chlo.constant"() {{value = dense<"{table}"> : tensor<{n}xf32>}} : () -> tensor<{n}xf32>
    %s = stablehlo.slice %c [7:8] : (tensor<{n}xf32>) -> tensor<1xf32>
    %r = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<f32>) -> {out}
    return %b : {out}
  }}
}}"""
    with mlir.make_ir_context():
        raw = mlir.module_to_bytecode(ir.Module.parse(text))
    return bytes(dataclasses.replace(plain, mlir_module_serialized=raw).serialize())


h.export_apply = forged
'''
SPINNING = SUBMISSION + '''

def spinning(model, variables, n_neurons):
    """An honest-looking export whose apply never returns: a loop on a value that only grows."""
    leaves = jax.tree_util.tree_leaves(variables)

    def apply_one(*args):
        grown = jax.lax.while_loop(lambda v: v > -1.0, lambda v: v * 1.5 + 1.0, jnp.abs(args[-1]).sum())
        return (jnp.zeros((32, n_neurons), jnp.float32) + grown,)

    return export_one(apply_one, leaves, [((CONTEXT, n_neurons), "float32")])


h.export_apply = spinning
'''


class Recorded:
    """The real executor, keeping each run's spec and result (the scorer's are not in the verdict)."""

    def __init__(self, inner) -> None:
        self.inner, self.runs = inner, []

    def gpu_count(self) -> int:
        return self.inner.gpu_count()

    def run(self, spec):
        result = self.inner.run(spec)
        self.runs.append((spec, result))
        return result

    def scorer(self):
        (found,) = [(spec, result) for spec, result in self.runs if spec.entry == "run_scorer"]
        return found


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory):
    from conftest import shared_task_data

    from evaluators.base import create_task
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    with shared_task_data(tmp_path_factory, "forecast"):
        task = create_task("forecasting", TINY)
        task.dataset.ensure()
        executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
        yield executor
        executor.close()


def evaluate(executor, code: str, **params):
    from evaluators.base import create_task

    task = create_task("forecasting", {**TINY, **params})
    recorded = Recorded(executor)
    result = task.execute(recorded, code, mounts=[], label="redteam-export")
    return task, recorded, result, (task.score(result) if result.status == "ok" else None)


def test_a_forged_export_with_a_chlo_table_is_refused_by_the_station(local) -> None:
    """The table rides in chlo.constant, past a count of stablehlo.constant only: the scorer refuses
    the export before it runs a checkpoint (before: the trial was scored from the table)."""
    _, recorded, result, verdict = evaluate(local, CHLO_TABLE)
    assert result.status == "ok" and verdict is not None and not verdict.success, result.stderr[-3000:]
    assert "the operation chlo.constant, which the station does not run" in verdict.details
    _, scorer = recorded.scorer()
    assert scorer.status == "ok" and "refused" in scorer.value


def test_a_spinning_export_is_stopped_by_the_trials_own_limit(local) -> None:
    """The apply function loops forever on the first checkpoint. The scorer is stopped by its wall
    clock or CPU time, both the trial's limit plus SCORER_MARGIN_S (before: the limit plus 120 s,
    all of it one busy core), and the trial is the submission's failure."""
    from evaluators.jaxtrain.two_stage import SCORER_MARGIN_S

    task, recorded, result, verdict = evaluate(local, SPINNING, trial_budget_s=10, grace_s=5)
    spec, scorer = recorded.scorer()
    assert spec.timeout_s == task.timeout_s + SCORER_MARGIN_S == 25.0
    assert spec.cpu_seconds == 25
    assert scorer.status in ("timeout", "error"), scorer.error
    assert "timed out after 25 seconds" in scorer.error or "CPU time limit" in scorer.error, scorer.error
    assert verdict is None or not verdict.success  # the trainer waited in vain too: the evaluation failed
    station = result.value["trials"][0]["station"]
    assert station["best"] is None and station["stop"] == "scorer-ended"
    assert "could not run the exported apply function" in station["failure"], station


def test_a_one_cpu_ray_instance_scores_a_trial_without_waiting(tmp_path_factory: pytest.TempPathFactory) -> None:
    """On Ray the trial's reservation (its trainer's num_cpus) covers its scorer, which asks Ray for
    nothing more. A scorer with a CPU of its own would be queued behind the trainer that fills a
    1-CPU instance, and the trainer would wait for it until its own time limit (measured: 90 of 90 s,
    2 checkpoints of 3). Here every checkpoint is measured and the trainer ends on the epoch limit."""
    pytest.importorskip("ray")
    from conftest import shared_task_data

    from evaluators.base import create_task
    from evaluators.jaxtrain.two_stage import SCORER_MARGIN_S
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    with shared_task_data(tmp_path_factory, "forecast"):

        task = create_task("forecasting", TINY)
        task.dataset.ensure()
        ray = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=1), hide=task.private_paths())
        try:
            _, recorded, result, verdict = evaluate(ray, task.baselines()[0].code)
        finally:
            ray.close()
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    trial = result.value["trials"][0]
    assert trial["status"] == "ok" and trial["station"]["stop"] == "max-epochs"
    assert trial["station"]["checkpoints"] == TINY["max_epochs"]
    trainer = next(spec for spec, _ in recorded.runs if spec.label.endswith("-train0"))
    scorer, _ = recorded.scorer()
    assert trainer.num_cpus == task.num_cpus == 1.0 and scorer.num_cpus == 0.0
    assert scorer.cpu_seconds == math.ceil(task.timeout_s + SCORER_MARGIN_S)
