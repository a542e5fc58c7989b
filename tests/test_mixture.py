"""Source mixtures (data.sources, kjax/batches/stream.py): shares, a phase's
weights, continuing a stream with other weights, per-source counters and
held-out losses, exact resume on other process, device, microbatch and
loader-worker counts, preparing several sources, and their one-line errors."""
import json
import os
import shutil
import subprocess
import sys

import grain
import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.batches.loader import ToModelInputs, train_dataset
from kjax.batches.stream import example_stream, mixture_weights, selection, start_position
from kjax.config.sources import sources
from kjax.errors import KjaxError
from kjax.examples import records
from kjax.objectives import check_config
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.pretrain import mixture
from kjax.pretrain.phases import phase_configs
from kjax.train.metrics import read_metrics
from kjax.train.stream_meter import StreamMeter
from test_train import assert_stop_and_resume_is_bit_exact


def mix(prepared, weights=(("web", 0.7), ("news", 0.3)), **extra):
    """Overrides of a mixture whose sources are all the fixture's prepared
    folder (each shuffled on a seed of its own: other streams, the same data)."""
    folder = os.path.join(str(prepared), "examples")
    return {"data.sources": {n: {"dir": folder, "weight": w} for n, w in weights}, **extra}


def test_one_source_streams_the_batches_it_always_did(prepared):
    """No data.sources: the pipeline before mixtures, batch for batch (masks included)."""
    config = tiny_config(prepared)
    d = config.data
    source = grain.sources.ArrayRecordDataSource(records.local_shards(d.dir, "train"))
    old = (grain.MapDataset.source(source).seed(d.seed + config.train.seed).shuffle()
           .repeat(None).map(records.decode_example)
           .random_map(ToModelInputs(config, dynamic_masking=True))
           .batch(8, drop_remainder=True)[1::2])
    mine = iter(train_dataset(config, 1, 2))
    for b in range(3):
        new = next(mine)
        assert new.keys() == old[b].keys() and "source" not in new
        assert all(np.array_equal(new[k], old[b][k]) for k in new)
    assert mine.get_state() == {"position": 48}


def test_the_realised_shares_over_2000_steps_are_the_weights(prepared):
    """0.7 / 0.3 over 2,000 steps of 16: each source's share of examples within
    ±2 points (grain's mix keeps every prefix in proportion), and the stream's
    examples come from the sources the selection names."""
    config = tiny_config(prepared, **mix(prepared))
    weights = mixture_weights(config)
    assert [s.name for s in sources(config)] == ["news", "web"] and weights == [0.3, 0.7]
    picks = selection(weights)
    ids = np.array([picks[k][0] for k in range(2000 * 16)])
    share = np.bincount(ids, minlength=2) / len(ids)
    assert abs(share[1] - 0.7) < 0.02 and abs(share[0] - 0.3) < 0.02
    stream, _ = example_stream(config)
    assert [stream[k]["source"] for k in range(40)] == ids[:40].tolist()
    assert [stream[k]["position"] for k in (0, 7, 39)] == [0, 7, 39]


def test_a_temperature_weighs_sources_by_their_size(tmp_path):
    """p ∝ weight · examples^τ (mmBERT's inverse temperature), normalised."""
    for name, n in (("big", 900), ("small", 100)):
        records.write_meta(str(tmp_path / name), {"train_examples": n})
    spec = {n: {"dir": str(tmp_path / n)} for n in ("big", "small")}
    config = tiny_config(tmp_path, **{"data.sources": spec, "data.source_temperature": 0.5})
    np.testing.assert_allclose(mixture_weights(config), [30 / 40, 10 / 40])
    config.data.source_temperature = 0.0
    assert mixture_weights(config) == [0.5, 0.5]


def test_a_phase_weights_take_effect_at_its_first_step(prepared):
    """Phases override a source's weight ('data.sources.NAME.weight'); each
    phase's stream is built with its own weights from its first batch on."""
    config = tiny_config(prepared, **mix(prepared, (("web", 1.0), ("news", 0.0))))
    config.phases = ({"name": "web", "overrides": {}},
                     {"name": "news", "overrides": {"data.sources.web.weight": 0.0,
                                                    "data.sources.news.weight": 1.0}})
    (_, first), (_, second) = phase_configs(config)
    assert next(iter(train_dataset(first)))["source"].tolist() == [1] * 16     # web
    assert next(iter(train_dataset(second)))["source"].tolist() == [0] * 16    # news


def test_a_stream_taken_over_with_other_weights_continues_each_source(prepared):
    """A later run may take a mixture over at position K with other weights
    (`origin`: the parent's position and per-source examples): each source's
    next example is the one after those the parent consumed."""
    parent = tiny_config(prepared, **mix(prepared))
    stream, _ = example_stream(parent)
    K = 64
    seen = [stream[k] for k in range(K + 40)]
    consumed = {"news": sum(e["source"] == 0 for e in seen[:K]),
                "web": sum(e["source"] == 1 for e in seen[:K])}
    child = tiny_config(prepared, **mix(prepared, (("web", 0.2), ("news", 0.8))))
    origin = {"position": K, "source_examples": consumed}
    taken, _ = example_stream(child, origin)
    after = [taken[i] for i in range(40)]
    assert [e["position"] for e in after] == list(range(K, K + 40))
    for sid, name in enumerate(("news", "web")):
        theirs = [e for e in seen if e["source"] == sid][consumed[name]:]
        mine = [e for e in after if e["source"] == sid]
        assert mine and all(np.array_equal(a["input_ids"], b["input_ids"])
                            for a, b in zip(mine, theirs))
    it = iter(train_dataset(child, origin=origin))
    next(it)
    assert it.get_state() == {"position": K + 16, "origin": origin}


def test_older_data_states_are_read_as_positions():
    assert start_position({"position": 48}, 16) == 48
    assert start_position({"next_index": 3}, 16) == 48       # grain's, one process
    workers = {"iterators_in_use_states": [{"next_index": 2}, {"next_index": 1}]}
    assert start_position(workers, 16) == 48                  # grain's worker processes
    with pytest.raises(ValueError, match="unknown data state"):
        start_position({"bins": 1}, 16)


def test_packed_rows_of_a_mixture_count_each_example_once(prepared):
    """train.packing with sources: each token carries its source through the
    packer; the counters take an example at its first token."""
    config = tiny_config(prepared, **mix(prepared, **{"train.packing": True,
                                                      "train.nsp_weight": 0.0}))
    batch = next(iter(train_dataset(config)))
    real = batch["segment_ids"] > 0
    assert ((batch["source"] >= 0) == real).all()
    starts = int(batch["source_starts"].sum())
    assert starts == sum(len(set(row[row > 0].tolist())) for row in batch["segment_ids"])
    meter = StreamMeter(config, make_mesh(config))
    left = meter.take(put_batch(batch, make_mesh(config)))
    assert "source" not in left and "source_starts" not in left
    counts = meter.metrics(left, 1)
    assert counts["source/news/examples"] + counts["source/web/examples"] == starts
    assert counts["source/news/tokens"] + counts["source/web/tokens"] == int(real.sum())


@pytest.mark.slow
def test_a_mixture_run_resumes_exactly_on_other_device_microbatch_and_worker_counts(
        prepared, tmp_path):
    """A 0.7 / 0.3 mixture with a 30 → 15 % mask schedule and per-source
    held-out losses: stopped at step 3 and resumed in this process, it ends
    bit-exact (state, data state, every logged row); resumed instead by the
    CLI on 4 devices with 2 microbatches and 2 loader workers, it logs the
    uninterrupted run's losses (rel 2e-6) and per-source counts exactly."""
    extra = mix(prepared, **{"data.mask_schedule": "linear", "data.masked_lm_prob": 0.3,
                             "data.final_masked_lm_prob": 0.15,
                             "data.max_predictions_per_seq": 18, "train.eval_every": 3})
    config = tiny_config(prepared, **extra)
    straight, resumed, other = (str(tmp_path / n) for n in ("straight", "resumed", "other"))
    from kjax.pretrain.trainer import train
    train(config, straight, progress=False)
    train(config, other, progress=False, stop_at=3)
    rows = assert_stop_and_resume_is_bit_exact(config, straight, resumed)
    counted = [rows[(s, "train")]["source/web/examples"] for s in range(1, 7)]
    assert counted == sorted(counted) and rows[(6, "train")]["source/news/examples"] + \
        counted[-1] == 6 * 16
    assert rows[(1, "train")]["mask_rate"] == 0.3
    assert {"eval/web/mlm_loss", "eval/news/mlm_loss"} <= {
        f"eval/{k}" for k in rows[(6, "eval")]}
    argv = [*tiny_overrides(str(prepared), **{"train.microbatches": 2,
                                              "train.loader_workers": 2, **extra})]
    out = subprocess.run(
        [sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG, "--workdir", other,
         *argv], capture_output=True, text=True, cwd=str(tmp_path),
        env={**os.environ, "JAX_NUM_CPU_DEVICES": "4", "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = {r["step"]: r for r in read_metrics(other) if r["split"] == "train"}
    for step in (4, 5, 6):
        mine = rows[(step, "train")]
        for key in ("loss", "mlm_loss", "nsp_loss"):
            np.testing.assert_allclose(theirs[step][key], mine[key], rtol=2e-6)
        assert {k: v for k, v in theirs[step].items() if k.startswith(("source/", "mask"))} \
            == {k: v for k, v in mine.items() if k.startswith(("source/", "mask"))}


def test_bad_sources_are_one_line(prepared, tmp_path):
    bad = {
        "weight=-1": {"web": {"dir": "x", "weight": -1}},
        "every weight is 0": {"web": {"dir": "x", "weight": 0}, "news": {"dir": "y",
                                                                          "weight": 0.0}},
        "is not a source name": {"we b": {"dir": "x"}},
        "unknown key 'path'": {"web": {"path": "x"}},
        "give its 'dir'": {"web": {"weight": 1.0}},
    }
    for message, spec in bad.items():
        with pytest.raises(KjaxError, match=message):
            check_config(tiny_config(prepared, **{"data.sources": spec}))
    with pytest.raises(KjaxError, match="needs data.sources"):
        check_config(tiny_config(prepared, **{"data.source_temperature": 0.5}))
    missing = tiny_config(prepared, **{"data.sources": {"web": {"dir": str(tmp_path / "no")}}})
    with pytest.raises(KjaxError, match=r"data.sources.web: .*no prepared data; give it a "):
        mixture.check_prepared(missing)
    no_eval = tmp_path / "no_eval"
    shutil.copytree(os.path.join(prepared, "examples"), no_eval)
    meta = records.read_meta(str(no_eval))
    records.write_meta(str(no_eval), {**meta, "eval_examples": 0})
    with pytest.raises(KjaxError, match=r"data.sources.news .* has no held-out split"):
        mixture.check_prepared(tiny_config(prepared, **{"data.sources": {
            "news": {"dir": str(no_eval)}, "web": {"dir": os.path.join(prepared, "examples")}}}))


def test_prepare_writes_each_source_into_its_own_folder(prepared, tmp_path):
    """`kjax prepare` with corpus sources: data.dir/NAME each (or the source's
    dir), every one a complete prepared folder; a dir-only source is taken as
    it is; the mixture then trains from them."""
    from kjax.cli import main
    from kjax.text.corpus import iter_documents, resolve_corpus
    docs = [doc for _, doc in zip(range(120), iter_documents(resolve_corpus("konlpy"), None))]
    for name, part in (("a", docs[:60]), ("b", docs[60:])):
        with open(tmp_path / f"{name}.txt", "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(doc) for doc in part))
    spec = {"a": {"corpus": str(tmp_path / "a.txt"), "weight": 2.0},
            "b": {"corpus": str(tmp_path / "b.txt"), "dir": str(tmp_path / "own_b")},
            "c": {"dir": os.path.join(prepared, "examples")}}
    argv = [f"--config.data.sources={json.dumps(spec)}",
            *tiny_overrides(str(prepared), **{"data.dir": str(tmp_path / "mix"),
                                              "data.eval_every_nth_doc": 5,
                                              "data.document_per_file": False})]
    assert main(["prepare", "--config", DEMO_CONFIG, *argv]) == 0
    for folder in (tmp_path / "mix" / "a", tmp_path / "own_b"):
        meta = records.read_meta(str(folder))
        assert meta["train_examples"] > 0 and meta["eval_examples"] > 0
    assert not (tmp_path / "mix" / "c").exists()
    config = tiny_config(prepared, **{"data.sources": spec, "data.dir": str(tmp_path / "mix")})
    assert len(mixture.check_prepared(config)) == 3
    assert set(next(iter(train_dataset(config)))["source"].tolist()) <= {0, 1, 2}
