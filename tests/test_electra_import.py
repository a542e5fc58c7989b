"""`kjax import` of an ELECTRA pair (kjax/export/electra_pair_import.py): `kjax
export` of an ELECTRA run → `kjax import` of its two folders → the very run
(every parameter, generator and RTD head included), which exports to the same
tensors and continues pretraining; a KoELECTRA-style pair named apart
(--generator) agrees with transformers; each refusal is one line."""
import json
import os
import shutil

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_overrides
from kjax.cli import main
from test_electra import ELECTRA, electra_config, electra_run  # noqa: F401 (a fixture)


def restored(workdir):
    from kjax.checkpoint.restore import restore_params
    from kjax.config import load_config, platform_defaults
    config = load_config(os.path.join(workdir, "kjax_config.py"))
    platform_defaults.resolve(config)   # as a verb does: models are built from resolved configs
    return config, restore_params(config, workdir)[0]


def assert_same_tree(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
        assert x.dtype == y.dtype and np.array_equal(x, y), jax.tree_util.keystr(path)


def safetensors_bytes(folder):
    from safetensors.numpy import load_file
    return {k: (v.dtype, v.shape, v.tobytes())
            for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}


@pytest.fixture(scope="module")
def round_trip(prepared, electra_run, tmp_path_factory):
    """(exported folder, imported workdir): the ELECTRA run exported, then imported."""
    root = tmp_path_factory.mktemp("electra_import")
    out, imported = str(root / "hf"), str(root / "imported")
    overrides = tiny_overrides(str(prepared), **ELECTRA)
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", electra_run,
                 "--out", out]) == 0
    # the base config is a BERT run with NSP: the pair makes it ELECTRA, NSP off
    assert main(["import", "--hf", out, "--out", imported,
                 *tiny_overrides(str(prepared))]) == 0
    return out, imported


@pytest.mark.slow
def test_the_imported_pair_is_the_exported_run(prepared, electra_run, round_trip, tmp_path):
    """Every leaf (tables, both encoders, both projections, the generator's MLM
    head, the RTD head) equal; exported again, the same tensors byte for byte."""
    from kjax.checkpoint.restore import restore_params
    out, imported = round_trip
    config, params = restored(imported)
    m = config.model
    assert m.arch == "electra" and config.train.nsp_weight == 0.0
    assert (m.generator_hidden_size, m.generator_num_layers, m.generator_num_heads,
            m.generator_intermediate_size, m.embedding_size) == (16, 2, 2, 32, 24)
    original, _ = restore_params(electra_config(prepared), electra_run)
    assert {"discriminator_predictions", "generator"} <= set(params)
    assert "embeddings_project" in params["generator"]   # E 24 → the generator's 16
    assert_same_tree(params, original)
    report = json.load(open(os.path.join(imported, "import.json"), encoding="utf-8"))
    assert report["initialised"] == [] and report["unused_source_tensors"] == []
    assert report["source"]["generator"] == os.path.abspath(os.path.join(out, "generator"))
    header = open(report["config"], encoding="utf-8").read().lstrip('"')
    assert header.startswith(f"Written by `kjax import --hf {out}`")
    again = str(tmp_path / "again")
    assert main(["export", "--workdir", imported, "--out", again]) == 0
    for side in ("discriminator", "generator"):
        assert safetensors_bytes(f"{again}/{side}") == safetensors_bytes(f"{out}/{side}"), side


@pytest.mark.slow
def test_continued_pretraining_of_an_imported_pair(prepared, round_trip, tmp_path):
    """`kjax train --init-from` the import: 2 steps of ELECTRA with finite
    losses, the lineage naming the imported parent."""
    from kjax.train.metrics import read_metrics
    _, imported = round_trip
    workdir = str(tmp_path / "continued")
    assert main(["train", "--config", os.path.join(imported, "kjax_config.py"), "--workdir",
                 workdir, "--init-from", imported, "--config.train.num_steps=2",
                 "--config.train.checkpoint_every=2"]) == 0
    rows = [r for r in read_metrics(workdir) if r["split"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert all(np.isfinite(row[k]) for k in ("loss", "mlm_loss", "rtd_loss")), row
    lineage = json.load(open(os.path.join(workdir, "lineage.json"), encoding="utf-8"))
    assert lineage["parent"] == imported and lineage["notes"] == []
    assert lineage["parent_imported_from"]["discriminator"].endswith("discriminator")


# ---- a KoELECTRA-style pair built by transformers ---------------------------------------
def hf_pair(root, generator=None):
    """(discriminator, generator) folders of a random transformers ELECTRA pair,
    named as KoELECTRA's repositories are: E = the discriminator's width (the
    generator projects E → 16) and a generator shallower than the discriminator."""
    import torch
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining
    common = dict(vocab_size=600, embedding_size=32, max_position_embeddings=64)
    torch.manual_seed(0)
    disc = ElectraForPreTraining(ElectraConfig(**common, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64))
    gen = ElectraForMaskedLM(ElectraConfig(**{**common, **(generator or {})}, hidden_size=16,
                                           num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=48))
    with torch.no_grad():
        for model in (disc, gen):   # off the 1 / 0 LayerNorm init, so every tensor counts
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        if gen.electra.embeddings.word_embeddings.weight.shape == \
                disc.electra.embeddings.word_embeddings.weight.shape:
            gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    folders = (os.path.join(root, "koelectra-discriminator"),
               os.path.join(root, "koelectra-generator"))
    for model, folder in zip((disc, gen), folders):
        model.save_pretrained(folder)
    return folders


@pytest.mark.slow
def test_a_pair_named_apart_matches_transformers(prepared, tmp_path):
    """--hf DISC --generator GEN: kjax's RTD logits and generator MLM logits
    are transformers' (generator_num_layers 1 of the discriminator's 2)."""
    import torch
    from transformers import ElectraForMaskedLM, ElectraForPreTraining
    from kjax.export import electra_pair_export as ep
    from kjax.export import hf_export as hx
    from kjax.model.config import EncoderConfig
    disc, gen = hf_pair(str(tmp_path))
    workdir = str(tmp_path / "w")
    assert main(["import", "--hf", disc, "--generator", gen, "--out", workdir,
                 *tiny_overrides(str(prepared))]) == 0
    config, params = restored(workdir)
    assert config.name == "koelectra" and config.model.embedding_size == 0
    assert (config.model.generator_hidden_size, config.model.generator_num_layers) == (16, 1)
    enc = EncoderConfig.from_config(config.model)
    inputs = hx.sample_inputs(enc, length=12)
    want = ep.kjax_outputs(params, enc, inputs)
    for name, folder, cls in (("discriminator", disc, ElectraForPreTraining),
                              ("generator", gen, ElectraForMaskedLM)):
        model = cls.from_pretrained(folder, dtype=torch.float32).eval()
        diffs = hx.max_abs_diffs(want[name], ep.torch_outputs(model, inputs),
                                 inputs["attention_mask"])
        assert max(diffs.values()) <= 1e-5, (name, diffs)


@pytest.mark.slow
def test_a_head_the_folders_lack_starts_as_a_fresh_run_would(prepared, tmp_path):
    """A discriminator saved without its RTD head: the head is `model.init`'s,
    named in import.json; everything else is the folders'."""
    from safetensors.torch import load_file, save_file
    from kjax.train.state import make_model
    from kjax.export import hf_import as hi
    disc, gen = hf_pair(str(tmp_path))
    file = os.path.join(disc, "model.safetensors")
    tensors = load_file(file)
    save_file({k: v for k, v in tensors.items() if not k.startswith("discriminator_")}, file,
              metadata={"format": "pt"})
    workdir = str(tmp_path / "w")
    assert main(["import", "--hf", disc, "--generator", gen, "--out", workdir,
                 *tiny_overrides(str(prepared))]) == 0
    report = json.load(open(os.path.join(workdir, "import.json"), encoding="utf-8"))
    assert report["initialised"] == ["discriminator_predictions"]
    config, params = restored(workdir)
    fresh = hi.fresh_params(config, make_model(config, False), ["discriminator_predictions"])
    assert_same_tree(params["discriminator_predictions"], fresh["discriminator_predictions"])
    assert np.array_equal(params["embeddings"]["word_embeddings"]["embedding"],
                          tensors["electra.embeddings.word_embeddings.weight"].numpy())


def refusal(capsys, argv) -> str:
    capsys.readouterr()   # (save_pretrained's progress bars)
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kjax: error: "), lines
    return lines[0]


def test_a_generator_with_its_own_embedding_width_is_refused(tmp_path, capsys):
    disc, gen = hf_pair(str(tmp_path), generator={"embedding_size": 16})
    line = refusal(capsys, ["import", "--hf", disc, "--generator", gen, "--out",
                            str(tmp_path / "w"), *tiny_overrides(str(tmp_path))])
    assert f"{gen}/config.json: embedding_size=16, but the discriminator's is 32" in line
    assert "cannot be expressed" in line


def test_a_generator_setting_the_discriminator_decides_is_refused(tmp_path, capsys):
    disc, gen = hf_pair(str(tmp_path), generator={"layer_norm_eps": 1e-5})
    line = refusal(capsys, ["import", "--hf", disc, "--generator", gen, "--out",
                            str(tmp_path / "w"), *tiny_overrides(str(tmp_path))])
    assert f"{gen}/config.json: layer_norm_eps=1e-05, but the discriminator's is 1e-12" in line


def test_untied_embeddings_are_refused(tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    disc, gen = hf_pair(str(tmp_path))
    file = os.path.join(gen, "model.safetensors")
    tensors = load_file(file)
    tensors["electra.embeddings.token_type_embeddings.weight"][1, 0] += 1.0
    save_file(tensors, file, metadata={"format": "pt"})
    line = refusal(capsys, ["import", "--hf", disc, "--generator", gen, "--out",
                            str(tmp_path / "w"), *tiny_overrides(str(tmp_path))])
    assert f"{gen}: electra.embeddings.token_type_embeddings.weight differs from the " \
           f"discriminator's" in line


def test_swapped_folders_are_refused(tmp_path, capsys):
    disc, gen = hf_pair(str(tmp_path))
    line = refusal(capsys, ["import", "--hf", gen, "--generator", disc, "--out",
                            str(tmp_path / "w"), *tiny_overrides(str(tmp_path))])
    assert f"{gen} holds generator_predictions.* tensors" in line and "swapped" in line


def test_a_pair_of_other_models_is_refused(tmp_path, capsys):
    disc, gen = hf_pair(str(tmp_path))
    with open(os.path.join(gen, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(gen, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**config, "model_type": "bert"}, f)
    line = refusal(capsys, ["import", "--hf", disc, "--generator", gen, "--out",
                            str(tmp_path / "w"), *tiny_overrides(str(tmp_path))])
    assert f"{gen}/config.json: model_type='bert', but the generator of an ELECTRA pair" in line


def test_a_parent_without_its_generator_is_refused(tmp_path, capsys):
    disc, _ = hf_pair(str(tmp_path / "src"))
    parent = str(tmp_path / "hf")
    shutil.copytree(disc, os.path.join(parent, "discriminator"))   # an --encoder-only export
    line = refusal(capsys, ["import", "--hf", parent, "--out", str(tmp_path / "w"),
                            *tiny_overrides(str(tmp_path))])
    assert f"{parent} holds discriminator/ but no generator/" in line
    assert f"--hf {parent}/discriminator" in line
