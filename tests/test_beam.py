"""`kjax prepare-beam` on Beam's DirectRunner writes the same bytes as
`kjax prepare`, resumes from chunk markers, and reads/writes gs:// paths
(a local GCS emulator) through kjax/paths.py."""
import os

import pytest

from conftest import DEMO_CONFIG
from kjax.cli import main
from kjax.examples import records
from kjax.pretrain import beam_prepare
from kjax.pretrain.prepare import prepare
from kjax.text.corpus import resolve_corpus
from pipeline_helpers import scheme_config, with_overrides, write_corpus

DIRECT = ["--runner=DirectRunner"]


def files_of(directory) -> dict[str, bytes]:
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in sorted(os.listdir(directory))}


def split_config(tmp, scheme):
    """Two documents per file and 7 per chunk: chunks span files, as in prepare."""
    corpus = write_corpus(tmp / "all.txt")
    config = scheme_config(tmp, scheme, corpus)
    parts = open(corpus, encoding="utf-8").read().split("\n\n")
    for i in range(0, len(parts), 2):
        (tmp / f"part-{i // 2:03d}.txt").write_text("\n\n".join(parts[i:i + 2]), encoding="utf-8")
    return with_overrides(config, **{"data.corpus": str(tmp / "part-*.txt"),
                                     "data.docs_per_chunk": 7})


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return split_config(tmp_path_factory.mktemp("beam"), "sentencepiece")


@pytest.fixture(scope="module", params=["sentencepiece", "multihot"])
def any_config(request, config, tmp_path_factory):
    """Each scheme ships different tokenizer files to the workers."""
    if request.param == "sentencepiece":
        return config
    return split_config(tmp_path_factory.mktemp("beam"), request.param)


def test_direct_runner_writes_the_bytes_prepare_writes(any_config, tmp_path):
    config = any_config
    local = with_overrides(config, **{"data.dir": str(tmp_path / "local")})
    beam = with_overrides(config, **{"data.dir": str(tmp_path / "beam")})
    meta = prepare(local, progress=False)
    assert meta["chunks"] >= 5 and len(resolve_corpus(config.data.corpus)) > meta["chunks"]
    assert beam_prepare.prepare_beam(beam, DIRECT) == meta
    # shards, chunk markers, fingerprint.json and meta.json: all identical
    assert files_of(tmp_path / "beam") == files_of(tmp_path / "local")
    assert beam_prepare.META_FILE == records.META_FILE


def test_beam_resumes_from_chunk_markers(config, tmp_path):
    out = tmp_path / "beam"
    beam = with_overrides(config, **{"data.dir": str(out)})
    first = beam_prepare.prepare_beam(beam, DIRECT)
    before = files_of(out)
    for index in (1, 3):       # two chunks lost with their markers, one shard half-written
        os.remove(records.chunk_marker(str(out), index))
        os.remove(records.shard_path(str(out), "train", index))
    with open(records.shard_path(str(out), "eval", 1), "r+b") as f:
        f.truncate(10)
    again = beam_prepare.prepare_beam(beam, DIRECT)
    assert again == {**first, "chunks_reused": first["chunks"] - 2}
    after = files_of(out)
    assert {k: v for k, v in after.items() if k != "meta.json"} == \
        {k: v for k, v in before.items() if k != "meta.json"}


def test_prepare_beam_verb_and_refusal_of_mixed_shards(config, tmp_path, capsys):
    out = tmp_path / "cli"
    overrides = [f"--config.{k}={v}" for k, v in {
        "tokenizer.scheme": config.tokenizer.scheme, "tokenizer.path": config.tokenizer.path,
        "model.vocab_size": config.model.vocab_size, "data.corpus": config.data.corpus,
        "data.dir": str(out), "data.docs_per_chunk": 7, "data.document_per_file": False,
        "data.eval_every_nth_doc": config.data.eval_every_nth_doc,
        "data.mask_unit": config.data.mask_unit, "data.max_seq_len": 64,
        "data.max_predictions_per_seq": 10, "model.max_position_embeddings": 64}.items()]
    assert main(["prepare-beam", "--config", DEMO_CONFIG, "--beam-options=--runner=DirectRunner",
                 *overrides]) == 0
    assert '"train_examples"' in capsys.readouterr().out
    assert main(["prepare-beam", "--config", DEMO_CONFIG, *overrides,
                 "--config.data.masked_lm_prob=0.2"]) == 2
    assert "holds shards made with another data config" in capsys.readouterr().err


def test_gs_paths_read_and_write_the_same_bytes(config, tmp_path, gs_root):
    """Corpus, tokenizer and data.dir on gs:// (the local GCS emulator, through
    kjax/paths.py as in production): the pipeline's shards equal the local
    ones, and nothing lands in a local folder named `gs:`."""
    from kjax import paths
    from gcs import local_gs_folders
    local = with_overrides(config, **{"data.dir": str(tmp_path / "local")})
    prepare(local, progress=False)
    for part, _ in paths.glob(config.data.corpus):
        paths.upload(part, f"{gs_root}/corpus/{paths.name(part)}")
    for suffix in (".model", ".vocab"):
        paths.upload(config.tokenizer.path + suffix, f"{gs_root}/tok/sp{suffix}")
    url = with_overrides(config, **{"data.corpus": f"{gs_root}/corpus/part-*.txt",
                                    "tokenizer.path": f"{gs_root}/tok/sp",
                                    "data.dir": f"{gs_root}/examples"})
    sources = resolve_corpus(url.data.corpus)
    assert sources and all(s.startswith(gs_root) for s in sources)
    meta = beam_prepare.prepare_beam(url, DIRECT)
    assert meta["documents"] == 58
    local_files = files_of(tmp_path / "local")
    remote_files = {n: paths.read_bytes(f"{gs_root}/examples/{n}")
                    for n in paths.listdir(f"{gs_root}/examples")}
    # Same shards and markers (meta and fingerprint name the corpus by its URL).
    named = ("meta.json", "fingerprint.json")
    assert {k: v for k, v in remote_files.items() if k not in named} == \
        {k: v for k, v in local_files.items() if k not in named}
    assert len(remote_files) == len(local_files) > 10
    assert not local_gs_folders(os.getcwd()) and not local_gs_folders(tmp_path)
