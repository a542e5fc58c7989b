"""`kjax prepare-beam`: `kjax prepare` as an Apache Beam pipeline (the `[beam]`
extra), for corpora too big for one machine. The shards are byte-identical
to `kjax prepare`'s: every chunk is made by the same `ChunkWorker`, seeded by
(data.seed, chunk index), from the same documents with the same ids.

    kjax prepare-beam --config C                                  (DirectRunner)
    kjax prepare-beam --config C --beam-options="--runner=DataflowRunner --project=P \
        --region=R --temp_location=gs://B/tmp --setup_file=./setup.py"

(`--beam-options=` with the `=`: its value starts with `--`; the verb is in
kjax/cli/pipeline.py.) docs/PREPARE.md
has the Dataflow, Flink and Spark commands.

The pipeline (all I/O through kjax/paths.py, as in `kjax prepare`: local
paths, gs://, s3://; Beam workers need only kjax installed):

    sources ─ count documents per source ─ first doc id per source (side input)
        └─ read each source again, number its documents, key them by chunk
           (doc_id // data.docs_per_chunk) ─ GroupByKey ─ ChunkWorker
           ─ copy shards, then the chunk marker, to data.dir ─ sum ─ meta.json

Chunks span files as in `kjax prepare`, so the global document numbering
needs every source's count first: the corpus is read twice, in parallel, and
the documents travel through Beam's shuffle (no seeking into .gz files, no
scan of the whole corpus on the launching machine). Chunks whose marker is
already in data.dir are skipped, so a failed job resumes; the tokenizer is
shipped inside the pipeline, so workers need only kjax installed.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import tempfile

from kjax import paths
from kjax.errors import import_extra
from kjax.text.corpus import CorpusStats, iter_documents

# kjax.pretrain.prepare / records are imported where used: they load flax and
# sentencepiece, and this module is imported by every `kjax` command (its verb).
_MARKER = re.compile(r"chunk-(\d+)\.json$")
META_FILE = "meta.json"  # = records.META_FILE (asserted in tests)


def _import_beam():
    return import_extra("apache_beam", "`kjax prepare-beam`", "beam")


# ---- files (kjax/paths.py: the same bytes `kjax prepare` writes) ----------
def finished_chunks(out_dir: str) -> dict[int, dict]:
    """{chunk index: counts} of the chunks whose marker is in out_dir."""
    done = {}
    for name in paths.listdir(out_dir):
        match = _MARKER.fullmatch(name)
        if match:
            done[int(match.group(1))] = paths.read_json(paths.join(out_dir, name))
    return done


def tokenizer_files(config) -> dict[str, bytes]:
    """The tokenizer's files by suffix after tokenizer.path (shipped to workers)."""
    from kjax.tokens.factory import tokenizer_file
    main = tokenizer_file(config)
    out = {}
    for path in (main, main + ".json"):  # multihot keeps its settings next to the vocabulary
        if paths.isfile(path):
            out[path[len(config.tokenizer.path):]] = paths.read_bytes(path)
    return out


# ---- pipeline steps (module level: workers import them) ---------------------
def _count_documents(item, document_per_file: bool) -> tuple[int, dict]:
    index, source = item
    stats = CorpusStats()
    for _ in iter_documents([source], stats, document_per_file):
        pass
    return index, dataclasses.asdict(stats)


def _first_doc_ids(counted: list) -> dict[int, int]:
    first, total = {}, 0
    for index, stats in sorted(counted):
        first[index], total = total, total + stats["documents"]
    return first


def _merge_stats(counted: list) -> dict:
    """Per-source stats merged in source order: the report `kjax prepare` gives."""
    stats = CorpusStats()
    for _, part in sorted(counted, key=lambda x: x[0]):
        stats.merge(CorpusStats(**part))
    return dataclasses.asdict(stats)


def _keyed_documents(item, first_ids: dict, docs_per_chunk: int, document_per_file: bool,
                     skip: frozenset):
    index, source = item
    for n, doc in enumerate(iter_documents([source], CorpusStats(), document_per_file)):
        doc_id = first_ids[index] + n
        if doc_id // docs_per_chunk not in skip:
            yield doc_id // docs_per_chunk, (doc_id, doc)


def _sum_counts(parts) -> dict:
    from kjax.pretrain.prepare import add_counts
    total: dict = {}
    for part in parts:
        add_counts(total, part)
    return total


def _config_from(config_dict: dict, **changes):
    from kjax.config import ConfigDict
    config = ConfigDict(config_dict)
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        config[section][key] = value
    return config


def _write_meta(summed: dict, stats: dict, config_dict: dict, out_dir: str, reused: int):
    from kjax.pretrain.prepare import add_counts, build_meta, new_totals
    config = _config_from(config_dict)
    corpus = CorpusStats(**stats)
    totals = new_totals()
    add_counts(totals, summed)
    totals["chunks"] = math.ceil(corpus.documents / config.data.docs_per_chunk)
    totals["chunks_reused"] = reused
    paths.write_json(paths.join(out_dir, META_FILE), build_meta(config, corpus, totals))


def make_chunk_fn(beam):
    class PrepareChunk(beam.DoFn):
        """Runs ChunkWorker with the shipped tokenizer (in a local scratch
        folder); it writes the shards and, last, the marker ("chunk done")."""

        def __init__(self, config_dict: dict, tokenizer: dict[str, bytes], out_dir: str):
            self.config_dict, self.tokenizer, self.out_dir = config_dict, tokenizer, out_dir

        def setup(self):
            from kjax.pretrain.prepare import ChunkWorker
            self.scratch = tempfile.mkdtemp(prefix="kjax-beam-")
            prefix = os.path.join(self.scratch, "tokenizer")
            for suffix, data in self.tokenizer.items():
                with open(prefix + suffix, "wb") as f:
                    f.write(data)
            config = _config_from(self.config_dict, **{"tokenizer.path": prefix})
            # Shards, then the marker, straight into data.dir (records.py moves
            # each file into place whole, locally or as one object upload).
            self.worker = ChunkWorker(config, out_dir=self.out_dir)

        def process(self, element):
            chunk_index, docs = element
            _, counts = self.worker((chunk_index, sorted(docs, key=lambda d: d[0])))
            yield counts

        def teardown(self):
            shutil.rmtree(getattr(self, "scratch", ""), ignore_errors=True)

    return PrepareChunk


def build_pipeline(pipeline, config, sources: list, done: dict[int, dict]) -> None:
    beam = _import_beam()
    d, config_dict = config.data, config.to_dict()
    sources_pc = (pipeline | "sources" >> beam.Create(list(enumerate(sources)))
                  | "spread sources" >> beam.Reshuffle())
    counted = sources_pc | "count documents" >> beam.Map(_count_documents, d.document_per_file)
    counted_list = counted | "gather counts" >> beam.combiners.ToList()
    first_ids = beam.pvalue.AsSingleton(counted_list | "first ids" >> beam.Map(_first_doc_ids))
    stats = beam.pvalue.AsSingleton(counted_list | "merge stats" >> beam.Map(_merge_stats))
    made = (sources_pc
            | "number documents" >> beam.FlatMap(_keyed_documents, first_ids, d.docs_per_chunk,
                                                 d.document_per_file, frozenset(done))
            | "group chunks" >> beam.GroupByKey()
            | "prepare chunks" >> beam.ParDo(
                make_chunk_fn(beam)(config_dict, tokenizer_files(config), d.dir)))
    reused = pipeline | "reused chunks" >> beam.Create(list(done.values()))
    ((made, reused) | beam.Flatten() | "sum counts" >> beam.CombineGlobally(_sum_counts)
     | "write meta" >> beam.Map(_write_meta, stats, config_dict, d.dir, len(done)))


def prepare_beam(config, beam_args: list[str] | None = None) -> dict:
    """Runs the pipeline (blocking) and returns meta.json, as `prepare` does
    (with data.sources: one pipeline per source that names a corpus)."""
    from kjax.config.sources import has_sources
    from kjax.pretrain import mixture
    if has_sources(config):
        return mixture.prepare_sources(config, prepare_beam, beam_args=beam_args)
    beam = _import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions
    from kjax.pretrain.prepare import check_fingerprint, check_inputs, corpus_sources
    d = config.data
    sources = corpus_sources(config)
    check_inputs(config, sources)
    paths.makedirs(d.dir)
    check_fingerprint(config)
    done = finished_chunks(d.dir)
    with beam.Pipeline(options=PipelineOptions(beam_args or [])) as pipeline:
        build_pipeline(pipeline, config, sources, done)
    return paths.read_json(paths.join(d.dir, META_FILE))
