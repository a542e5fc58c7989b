"""ELECTRA (model.arch='electra', kjax/model/electra.py, objective `rtd`): a
tiny generator and discriminator train on CPU; the generator's samples are a
function of (key, global example, position); gradient accumulation and a
kill/resume give the uninterrupted whole-batch run; config errors are one
line; `kjax export` writes both models for transformers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from kjax.errors import KjaxError
from kjax.model import dropout_hash
from kjax.model.electra import corrupt, gumbel_noise, sample_tokens
from kjax.objectives import check_config, reported_metrics
from kjax.pretrain.trainer import evaluate, train
from kjax.train.metrics import read_metrics

# E = 24 between the generator's 16 and the discriminator's 32: both sides
# project their shared tables, the paths KoELECTRA-small and -base take.
ELECTRA = {"model.arch": "electra", "train.nsp_weight": 0.0, "model.embedding_size": 24,
           "model.generator_hidden_size": 16, "model.generator_num_heads": 2,
           "model.generator_intermediate_size": 32}
RTD_METRICS = ("rtd_loss", "rtd_accuracy", "rtd_precision", "rtd_recall", "replaced_share")


def electra_config(prepared, **extra):
    return tiny_config(prepared, **{**ELECTRA, **extra})


def test_the_samples_are_a_function_of_key_example_and_position():
    """A row's draws are those of its global index wherever it sits, and the
    Gumbel-max draws follow softmax(logits)."""
    words = dropout_hash.key_words(jax.random.key(7))
    logits = jax.random.normal(jax.random.key(0), (8, 5, 40))
    positions = jnp.tile(jnp.array([3, 9, 1, 4, 20], jnp.int32), (8, 1))
    whole = np.asarray(sample_tokens(logits, words, positions))
    rows = np.array([6, 1], np.int32)
    part = np.asarray(sample_tokens(logits[rows], words, positions[rows], jnp.asarray(rows)))
    np.testing.assert_array_equal(part, whole[rows])
    assert not np.array_equal(whole[0], whole[1])   # rows draw apart (same logits in no row)
    other = np.asarray(sample_tokens(logits, dropout_hash.key_words(jax.random.key(8)),
                                     positions))
    assert not np.array_equal(whole, other)
    # a slot's noise follows its position, not its slot index
    swapped = np.asarray(gumbel_noise(words, (1, 2, 40), jnp.array([[9, 3]], jnp.int32)))
    noise = np.asarray(gumbel_noise(words, (1, 2, 40), jnp.array([[3, 9]], jnp.int32)))
    np.testing.assert_array_equal(swapped[0, ::-1], noise[0])
    # Gumbel-max: empirical frequencies match the softmax (4000 draws of one slot)
    draws = np.asarray(sample_tokens(jnp.tile(jnp.log(jnp.array([0.6, 0.3, 0.1])), (4000, 1, 1)),
                                     words, jnp.ones((4000, 1), jnp.int32)))
    np.testing.assert_allclose(np.bincount(draws[:, 0], minlength=3) / 4000, [0.6, 0.3, 0.1],
                               atol=0.03)


def test_corrupt_replaces_only_real_slots():
    ids = jnp.array([[2, 10, 11, 12, 3]], jnp.int32)
    out = corrupt(ids, jnp.array([[1, 3, 0, 0]], jnp.int32), jnp.array([[50, 51, 52, 53]]))
    np.testing.assert_array_equal(out, [[2, 50, 11, 51, 3]])   # [CLS] (padding slots) kept


def test_config_errors_are_one_line(prepared):
    cases = [({"model.input_mode": "multihot", "tokenizer.scheme": "multihot",
               "train.mlm_loss": "eq9", "data.mask_unit": "morpheme"},
              r"model.arch='electra' with model.input_mode='multihot'"),
             ({"model.generator_hidden_size": 20, "model.generator_num_heads": 3},
              r"generator's width 20 is not divisible by its 3 heads"),
             ({"train.nsp_weight": 1.0}, r"model.arch=electra has no NSP head"),
             ({"train.rtd_weight": 0.0}, r"train.rtd_weight=0.0 is not allowed")]
    for extra, message in cases:
        with pytest.raises(KjaxError, match=message) as e:
            check_config(electra_config(prepared, **extra))
        assert "\n" not in str(e.value)


def test_reported_metrics_of_an_electra_run(prepared):
    names = reported_metrics(electra_config(prepared))
    assert "nsp_loss" not in names and {"mlm_loss", "mlm_accuracy", *RTD_METRICS} <= set(names)


@pytest.mark.slow
def test_a_tiny_electra_trains(prepared, tmp_path):
    """The generator's MLM improves and the discriminator beats "all original"
    on held-out data; every RTD metric reaches metrics.jsonl and `kjax eval`.
    (Measured: at 32 wide, or at lr 2e-3 and above, the discriminator sat on
    the prior for 400 steps; 64 wide at 5e-4 leaves it by step 120.)"""
    config = electra_config(prepared, **{
        "model.hidden_size": 64, "train.num_steps": 150, "train.learning_rate": 5e-4,
        "train.warmup_steps": 12, "train.eval_every": 150, "train.checkpoint_every": 150,
        "train.log_every": 10})
    workdir = str(tmp_path / "run")
    train(config, workdir, progress=False)
    rows = [r for r in read_metrics(workdir) if r["split"] == "train"]
    assert rows[-1]["loss"] < rows[0]["loss"] - 10
    assert rows[-1]["mlm_loss"] < rows[0]["mlm_loss"] - 0.3
    assert rows[-1]["mlm_accuracy"] > rows[0]["mlm_accuracy"] + 0.1
    for row in rows:
        assert set(RTD_METRICS) <= set(row)
        assert row["rtd_precision"] == pytest.approx(
            row["rtd_caught_share"] / max(row["rtd_flagged_share"], 1e-8), rel=1e-5)
    result = evaluate(config, workdir)
    logged = [r for r in read_metrics(workdir) if r["split"] == "eval"][-1]
    for name in RTD_METRICS:
        assert result[name] == pytest.approx(logged[name], rel=1e-5), name
    # "all original" scores 1 − replaced_share; the discriminator must beat it
    assert result["rtd_accuracy"] > 1 - result["replaced_share"] + 0.005
    assert 0 < result["replaced_share"] < 0.3


# 32 rows on 4 batch shards, as tests/test_accumulation.py
MESH = {"train.batch_size": 32, "mesh.data": 4, "mesh.fsdp": 1, "mesh.tensor": 2}


@pytest.mark.slow
def test_microbatches_give_the_whole_batch_step(prepared):
    """k = 1 and 4: the same samples (hashed by global example), each loss over
    its own slots (masked positions, real tokens), the same parameters."""
    from test_accumulation import assert_same_run
    assert_same_run(lambda k: electra_config(prepared, **MESH, **{"train.microbatches": k}),
                    ks=(4,))


@pytest.fixture(scope="module")
def electra_run(prepared, tmp_path_factory):
    """electra_config(prepared)'s finished run: 6 steps, saved at 3 and 6."""
    workdir = str(tmp_path_factory.mktemp("electra") / "run")
    train(electra_config(prepared), workdir, progress=False)
    return workdir


@pytest.mark.slow
def test_kill_and_resume_is_bit_exact(prepared, electra_run, tmp_path):
    """Stopped at step 3 and resumed: the parameters and the logged metrics of
    steps 4-6 are the uninterrupted run's, bit for bit."""
    from test_train import assert_stop_and_resume_is_bit_exact
    rows = assert_stop_and_resume_is_bit_exact(electra_config(prepared), electra_run,
                                               str(tmp_path / "resumed"))
    for step in (4, 5, 6):
        assert "rtd_precision" in rows[(step, "train")]


def test_rtd_labels_count_a_sample_equal_to_the_original_as_original():
    from kjax.losses.replaced import rtd_loss
    batch = {"input_ids": jnp.array([[2, 4, 11, 4, 3, 0]]),          # 4: [MASK], 0: padding
             "attention_mask": jnp.array([[1, 1, 1, 1, 1, 0]]),
             "mlm_positions": jnp.array([[1, 3, 0]]), "mlm_ids": jnp.array([[20, 21, 0]]),
             "mlm_weights": jnp.array([[1.0, 1.0, 0.0]])}
    seen = jnp.array([[2, 20, 11, 9, 3, 0]])     # slot 1 drew the original, slot 3 did not
    logits = jnp.array([[-1.0, 1.0, -1.0, 1.0, -1.0, 5.0]])   # padding's logit counts nowhere
    _, m = rtd_loss(logits, seen, batch)
    assert float(m["replaced_share"]) == pytest.approx(1 / 5)
    assert float(m["rtd_flagged_share"]) == pytest.approx(2 / 5)
    assert float(m["rtd_caught_share"]) == pytest.approx(1 / 5)
    assert float(m["rtd_accuracy"]) == pytest.approx(4 / 5)


# ---- export to transformers, import, fine-tuning --------------------------------------
@pytest.mark.slow
def test_export_writes_the_discriminator_and_the_generator(prepared, electra_run, tmp_path):
    """`kjax export`: OUT/discriminator loads as transformers' ElectraForPreTraining,
    OUT/generator as ElectraForMaskedLM, each agreeing with kjax within 1e-4 on
    tokenized text; their model cards run; `kjax import` reads them back."""
    from transformers import AutoTokenizer, ElectraForMaskedLM, ElectraForPreTraining
    from conftest import DEMO_CONFIG, tiny_overrides
    from test_export import run_model_card
    from kjax.checkpoint.restore import restore_params
    from kjax.cli import main
    from kjax.config import load_config
    from kjax.export import electra_pair_export as ep
    from kjax.export import hf_export as hx
    from kjax.model.config import EncoderConfig
    config = electra_config(prepared)
    overrides = tiny_overrides(str(prepared), **ELECTRA)
    out = str(tmp_path / "hf")
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", electra_run,
                 "--out", out]) == 0
    tokenizer = AutoTokenizer.from_pretrained(f"{out}/discriminator")
    batch = tokenizer(["대한민국은 민주공화국이다.", "국회는 법률을 만든다."],
                      ["모든 권력은 국민으로부터 나온다.", "🙂"], padding=True, return_tensors="np")
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    assert inputs["attention_mask"].min() == 0
    params, step = restore_params(config, electra_run)
    enc = EncoderConfig.from_config(config.model)
    want = ep.kjax_outputs(params, enc, inputs)
    for name, cls in (("discriminator", ElectraForPreTraining), ("generator", ElectraForMaskedLM)):
        model = cls.from_pretrained(f"{out}/{name}").eval()
        diffs = hx.max_abs_diffs(want[name], ep.torch_outputs(model, inputs),
                                 inputs["attention_mask"])
        assert set(diffs) == {"hidden", "logits"} and max(diffs.values()) <= 1e-4, (name, diffs)
        card = open(f"{out}/{name}/README.md", encoding="utf-8").read()
        assert "## ELECTRA" in card and "rtd_accuracy" in card and f"step {step}" in card
        run_model_card(f"{out}/{name}")
    # the discriminator's encoder (and the generator as an MLM model) back into kjax
    for name, part in (("discriminator", params),
                       ("generator", ep.side(params, enc, "generator")[0])):
        back_dir = str(tmp_path / f"back_{name}")
        assert main(["import", "--hf", f"{out}/{name}", "--out", back_dir,
                     *tiny_overrides(str(prepared))]) == 0
        back, _ = restore_params(load_config(f"{back_dir}/kjax_config.py"), back_dir)
        for key in ("embeddings", "encoder"):
            for a, b in zip(jax.tree.leaves(back[key]), jax.tree.leaves(part[key])):
                np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_finetune_init_takes_the_discriminator(prepared, electra_run, tmp_path):
    """`kjax finetune --init` of the run: the task model's encoder is the
    discriminator's (tables, projection, layers); a fresh pooler and head."""
    from test_finetune import FT, synthetic, write_jsonl
    from kjax.checkpoint.restore import restore_params
    from kjax.finetune.experiment import finetune_settings, make_tuner
    from kjax.tokens.factory import load_tokenizer
    config = electra_config(prepared)
    files = [write_jsonl(tmp_path / f"{split}.jsonl", synthetic("classify", 32, seed))
             for seed, split in enumerate(("train", "dev"))]
    tuner = make_tuner(config, finetune_settings(FT), "classify", *files, init=electra_run,
                       tokenizer=load_tokenizer(config))
    bert = jax.device_get(tuner.init_state(0)["params"]["bert"])
    pre, _ = restore_params(config, electra_run)
    assert set(bert) == {"embeddings", "encoder"}
    for a, b in zip(jax.tree.leaves(bert), jax.tree.leaves({k: pre[k] for k in bert})):
        np.testing.assert_array_equal(a, b)


def test_eq1_shakes_the_discriminator_and_not_the_generator():
    """B (Eq. 1) changes the discriminator's hidden states and leaves the
    generator's logits, hence its samples, as they were."""
    from kjax.model.config import EncoderConfig
    from kjax.model.electra import ElectraForPreTraining
    enc = EncoderConfig(arch="electra", vocab_size=50, hidden_size=32, embedding_size=16,
                        num_layers=2, num_heads=4, intermediate_size=64,
                        max_position_embeddings=16, dtype="float32", shake_factor=(0.5, 0.5))
    model = ElectraForPreTraining(enc)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 50, (2, 12)), jnp.int32)
    args = (ids, jnp.zeros_like(ids), jnp.ones_like(ids), jnp.array([[2, 5], [3, 0]]))
    params = model.init(jax.random.key(0), *args)["params"]
    plain = model.apply({"params": params}, *args, shake=jnp.zeros((2, 12, 12)))
    shaken = model.apply({"params": params}, *args,
                         shake=jnp.asarray(rng.random((2, 12, 12)) < 0.3, jnp.float32))
    np.testing.assert_array_equal(plain["mlm_logits"], shaken["mlm_logits"])
    np.testing.assert_array_equal(plain["rtd_input_ids"], shaken["rtd_input_ids"])
    # (at init the logits are near 0, so |s ⊙ B| · bf moves the output little, but it moves)
    assert np.abs(np.asarray(plain["hidden"]) - np.asarray(shaken["hidden"])).max() > 1e-6
