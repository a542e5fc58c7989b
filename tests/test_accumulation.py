"""Gradient accumulation (train.microbatches): k microbatches of one global
batch give the whole batch's step — the same loss, metrics and parameters —
because losses are normalised over the whole batch and dropout hashes each
row's global example index (kjax/train/accumulation.py)."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import ROOT, tiny_config, tiny_overrides
from kjax.batches.loader import train_dataset
from kjax.errors import KjaxError
from kjax.model import dropout_hash
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.train.metrics import read_metrics
from kjax.train.state import init_state, make_model, make_optimizer
from kjax.train.step import make_train_step

# 32 rows on 4 batch shards (data 4 × tensor 2): k = 8 leaves one row a shard.
MESH = {"train.batch_size": 32, "mesh.data": 4, "mesh.fsdp": 1, "mesh.tensor": 2}
# A key's bias has no true gradient (softmax ignores a constant added to every
# logit of a query: attention's keys, the verb head's pointer keys), so its
# gradient is summation noise that Adam scales to ±lr: it differs between any
# two orders of summation, split or not.
NOISE_ONLY = ("['attention']['key']['bias']", "['verb_key']['bias']")
# The NSP head's gradients nearly cancel (the tiny run's NSP is at chance), so
# any change in summation order moves them more: the same k = 1 step on 8 × 1
# devices instead of 4 × 2 leaves the pooler bias 4.7e-6 off after 3 steps,
# k = 8 1.8e-5. Every other leaf stays within 1e-6 (measured: ≤ 3e-7).
CANCELLING = ("['pooler']", "['nsp']")
CANCELLING_RTOL = 5e-5


def run_steps(config, steps=3):
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    batches = iter(train_dataset(config))
    metrics = []
    for _ in range(steps):
        state, m = step(state, put_batch(next(batches), mesh))
        metrics.append(jax.device_get(m))
    return jax.device_get(state["params"]), metrics


def worst_leaf(params, reference, rtol):
    """The largest ‖a − b‖ / ‖b‖ over the leaves in units of each one's
    tolerance (`rtol`, CANCELLING_RTOL for the NSP head; the noise-only leaf aside)."""
    def off(path, a, b):
        name = jax.tree_util.keystr(path)
        tol = CANCELLING_RTOL if name.startswith(CANCELLING) else rtol
        return np.linalg.norm(a - b) / np.linalg.norm(b) / max(tol, rtol), name
    return max(off(path, a, b) for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(reference))
        if not any(n in jax.tree_util.keystr(path) for n in NOISE_ONLY)
        and np.linalg.norm(b) > 0)


def assert_same_run(config_of, ks=(4, 8), params_rtol=1e-6, metrics_rtol=1e-6):
    reference, reference_metrics = run_steps(config_of(1))
    for k in ks:
        params, metrics = run_steps(config_of(k))
        worst, leaf = worst_leaf(params, reference, params_rtol)
        assert worst <= 1, f"k={k}: {leaf} off by {worst:.2f}× its tolerance"
        for got, want in zip(metrics, reference_metrics):
            assert got.keys() == want.keys()
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=metrics_rtol,
                                           atol=1e-7, err_msg=f"k={k} {name}")


def test_microbatches_give_the_whole_batch_step(prepared):
    """fp32, hidden and attention dropout 0.1, MLM + NSP: k = 1, 4 and 8."""
    assert_same_run(lambda k: tiny_config(prepared, **MESH, **{"train.microbatches": k}))


def test_microbatches_with_shaking_pairs_on_the_flash_path(prepared):
    """Eq. 1 with a random B as pairs, inside the flash kernel, whose keep bits
    take each shard's first global example from the microbatch's rows."""
    extra = {"model.shake_factor": 0.3, "shake.variant": "random", "shake.layout": "pairs",
             "model.attention_impl": "flash", "train.mlm_loss": "ce"}
    assert_same_run(lambda k: tiny_config(prepared, **MESH, **extra,
                                          **{"train.microbatches": k}), ks=(4,))


def test_microbatches_in_bfloat16(prepared):
    """bf16 activations: the same masks and normalisation, but each microbatch's
    matmuls round in bf16 on other partial sums, so k changes the step as much
    as a change of device layout does, which resumes already allow. Measured
    after 3 steps, k = 1 on 8 × 1 devices against 4 × 2: the encoder's leaves
    up to 1.4e-2 apart (k = 4: 1.9e-2), the losses 2e-6; the NSP head, near
    zero gradients, is noise in bf16 either way (0.56 and 0.46) and is left out."""
    reference, reference_metrics = run_steps(tiny_config(prepared, **MESH, **{
        "model.dtype": "bfloat16"}))
    params, metrics = run_steps(tiny_config(prepared, **MESH, **{
        "model.dtype": "bfloat16", "train.microbatches": 4}))
    del params["pooler"], params["nsp"], reference["pooler"], reference["nsp"]
    worst, leaf = worst_leaf(params, reference, 3e-2)
    assert worst <= 1, f"{leaf} off by {worst:.2f}× its tolerance"
    for got, want in zip(metrics, reference_metrics):
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)


@pytest.mark.slow
def test_microbatches_with_multihot_input_and_knowledge_heads(tmp_path):
    """UKnowBERT-S (tiny): the multi-hot input's segment sums, Eq. 9 and the
    three knowledge heads, each loss over its own slots."""
    from test_uknowbert import variant_config
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import open_tokenizer, train_tokenizer
    config = variant_config("uknowbert_s", tmp_path)
    train_tokenizer(config)
    vocab = open_tokenizer(config).vocab_size
    prepare(variant_config("uknowbert_s", tmp_path, vocab), progress=False)

    def config_of(k):
        c = variant_config("uknowbert_s", tmp_path, vocab)
        c.train.update(batch_size=32, microbatches=k)
        c.mesh.update(data=8, fsdp=1, tensor=1)   # its vocabulary (1121 rows) splits no way
        return c
    assert_same_run(config_of, ks=(4,))


def test_hidden_dropout_bits_follow_the_global_example():
    """A row's bits are those of its global index, wherever it sits, and the
    rate is the configured one."""
    words = dropout_hash.key_words(jax.random.key(3))
    whole = np.asarray(dropout_hash.hidden_keep_mask(words, (8, 16, 33), 0.1))
    rows = np.array([5, 2], np.int32)
    part = np.asarray(dropout_hash.hidden_keep_mask(words, (2, 16, 33), 0.1, rows))
    np.testing.assert_array_equal(part, whole[rows])
    assert abs((~whole).mean() - 0.1) < 0.02
    assert not np.array_equal(whole[0], whole[1])   # rows differ
    other = np.asarray(dropout_hash.hidden_keep_mask(
        dropout_hash.key_words(jax.random.key(4)), (8, 16, 33), 0.1))
    assert not np.array_equal(whole, other)          # keys differ


def test_bad_microbatch_counts_are_one_line(prepared):
    from kjax.objectives import check_config
    with pytest.raises(KjaxError, match=r"train.microbatches=3 does not divide "
                                        r"train.batch_size=32"):
        check_config(tiny_config(prepared, **MESH, **{"train.microbatches": 3}))
    with pytest.raises(KjaxError, match=r"microbatches of 2 examples, which the 4 batch "
                                        r"shards .* multiple of 64"):
        make_mesh(tiny_config(prepared, **MESH, **{"train.microbatches": 16}))


def test_a_run_resumed_with_another_split_and_device_count_logs_the_same_losses(
        prepared, trained_run, tmp_path):
    """Stopped at step 3 with k = 1 on 8 devices, resumed by the CLI with k = 4
    on 4 devices: steps 4-6 log the uninterrupted run's losses."""
    from kjax.pretrain.trainer import train
    workdir = str(tmp_path / "run")
    train(tiny_config(prepared), workdir, progress=False, stop_at=3)
    config = os.path.join(ROOT, "tpu_configs", "demo.py")
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "4"}
    out = subprocess.run(
        [sys.executable, "-m", "kjax.cli", "train", "--config", config, "--workdir", workdir,
         *tiny_overrides(str(prepared), **{"train.microbatches": 4})],
        capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]

    def losses(path):
        return {r["step"]: (r["loss"], r["mlm_loss"], r["nsp_loss"])
                for r in read_metrics(path) if r["split"] == "train"}
    resumed, straight = losses(workdir), losses(trained_run)
    assert sorted(resumed) == sorted(straight) == list(range(1, 7))
    for step in range(4, 7):
        np.testing.assert_allclose(resumed[step], straight[step], rtol=2e-6,
                                   err_msg=f"step {step}")


def test_one_row_a_shard_on_a_three_axis_mesh_is_refused(prepared):
    """The case whose gradients XLA got wrong (one row a shard, every mesh axis
    > 1) is refused; the same mesh with two rows a shard trains the step the
    whole batch would (the test above it runs that mesh shape)."""
    cube = {"train.batch_size": 32, "mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}
    with pytest.raises(KjaxError, match=r"one example per batch shard .* wrong gradients"):
        make_mesh(tiny_config(prepared, **cube, **{"train.microbatches": 8}))
    reference, _ = run_steps(tiny_config(prepared, **MESH), steps=1)
    params, _ = run_steps(tiny_config(prepared, **cube, **{"train.microbatches": 4}), steps=1)
    worst, leaf = worst_leaf(params, reference, 1e-6)
    assert worst <= 1, f"{leaf} off by {worst:.2f}× its tolerance"


def test_a_run_resumes_across_the_sharded_optimizer_choice(prepared, trained_run, tmp_path):
    """mesh.shard_update lays the optimizer state out over the data axis
    (ZeRO-1) or replicates it; orbax restores either onto the other. Stopped
    at step 3 with it off and resumed with it on, and the reverse: steps 4-6
    log the uninterrupted run's losses (its default, on) and end at its
    parameters, up to the order of float sums."""
    from test_train import final_params
    from kjax.pretrain.trainer import train
    straight = {r["step"]: r["loss"] for r in read_metrics(trained_run) if r["split"] == "train"}
    want, _ = final_params(tiny_config(prepared), trained_run)
    for first, then in ((False, True), (True, False)):
        workdir = str(tmp_path / f"from_{first}")
        train(tiny_config(prepared, **{"mesh.shard_update": first}), workdir, progress=False,
              stop_at=3)
        config = tiny_config(prepared, **{"mesh.shard_update": then})
        train(config, workdir, progress=False)
        resumed = {r["step"]: r["loss"] for r in read_metrics(workdir) if r["split"] == "train"}
        for step in range(4, 7):
            np.testing.assert_allclose(resumed[step], straight[step], rtol=2e-6,
                                       err_msg=f"{first} → {then}, step {step}")
        got, _ = final_params(config, workdir)
        worst, leaf = worst_leaf(got["params"], want["params"], 1e-6)
        assert worst <= 1, f"{first} → {then}: {leaf} off by {worst:.2f}× its tolerance"


def test_the_optimizer_state_is_laid_out_over_the_data_axis(prepared):
    """mesh.shard_update's layout (kjax/parallel/mesh.py data_sharded): the
    data axis on the largest dimension that no axis of more than one device
    splits, the same for a parameter and its two Adam moments; off, both
    stay replicated over it."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    from kjax.parallel.mesh import data_sharded
    from kjax.train.state import abstract_state, state_shardings
    config = tiny_config(prepared, **MESH)
    mesh = make_mesh(config)
    layout = lambda spec, shape: data_sharded(NamedSharding(mesh, spec), shape).spec  # noqa: E731
    assert layout(P(None, "fsdp", "tensor"), (2, 32, 64)) == P(None, ("fsdp", "data"), "tensor")
    assert layout(P("tensor", None), (600, 32)) == P("tensor", "data")
    assert layout(P("tensor"), (64,)) == P("tensor")       # tensor splits its only dimension
    assert layout(P(), (6,)) == P()                        # 4 does not divide 6
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    shapes, on = abstract_state(config, mesh, model, tx)
    off = state_shardings(tiny_config(prepared, **MESH, **{"mesh.shard_update": False}),
                          mesh, model, tx)
    split = lambda tree: sum("data" in str(s.spec) for s in jax.tree.leaves(tree))  # noqa: E731
    assert split(off["params"]) == split(off["opt_state"]) == 0
    assert split(on["params"]) >= 20 and split(on["opt_state"]) == 2 * split(on["params"])
    table = shapes["params"]["embeddings"]["word_embeddings"]["embedding"]   # [600, 32]
    assert table.sharding.spec == P("tensor", ("fsdp", "data"))


def test_fsdp_parameters_gathered_once_a_step_or_every_microbatch(prepared):
    """Under FSDP (and the data axis's slices, mesh.shard_update) the
    parameters are gathered before the microbatch loop (fsdp_gather=step) or
    in every microbatch (microbatch): either way k = 4 gives the k = 1 step."""
    cube = {"train.batch_size": 32, "mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}
    reference, _ = run_steps(tiny_config(prepared, **cube), steps=2)
    for mode in ("step", "microbatch"):
        params, _ = run_steps(tiny_config(prepared, **cube, **{
            "train.microbatches": 4, "mesh.fsdp_gather": mode}), steps=2)
        worst, leaf = worst_leaf(params, reference, 1e-6)
        assert worst <= 1, f"fsdp_gather={mode}: {leaf} off by {worst:.2f}× its tolerance"
