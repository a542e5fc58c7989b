"""`kjax prepare`: corpus → tokenized documents → pair examples → shards.

Streamed and memory-bounded: documents are read in chunks of
`data.docs_per_chunk`; each chunk becomes one train shard (and one eval
shard for its held-out documents), so memory never holds more than a chunk.
NSP negatives are drawn from other documents of the same chunk.

Every random choice is seeded by (data.seed, chunk index), so the output
does not depend on how many worker processes run, and a finished shard is
skipped when a killed job is started again. `ChunkWorker` is the per-chunk
work; kjax/pretrain/beam_prepare.py runs the same class as an Apache Beam
pipeline and writes byte-identical shards.

Bad input never stops the job and is never dropped silently: skipped lines
(by reason), documents with no usable line, documents that gave no example
and sentences that gave no token are counted in meta.json.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import json
import multiprocessing

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.batches.packing import packed_rows
from kjax.config.sources import has_sources
from kjax.pretrain import mixture
from kjax.progress import Progress
from kjax.examples import records
from kjax.examples.masking import static_mask_rng
from kjax.inputs import mask_example
from kjax.examples.pairs import pairs_from_document
from kjax.text.corpus import CorpusStats, iter_documents, resolve_corpus
from kjax.tokens.factory import load_tokenizer, tokenizer_file
from kjax.tokens.sentencepiece import KJAX_SPECIAL_IDS

# Counters every chunk reports (its marker) and `prepare` sums into meta.json.
CHUNK_COUNTS = ("train_examples", "eval_examples", "tokens", "documents",
                "documents_without_examples", "sentences_without_tokens",
                "sentences_truncated", "unknown_tags", "train_example_tokens",
                "train_packed_rows")

_worker_state: dict = {}


def tokenize_documents(docs, tok, splitter=None):
    """[(doc_id, [sentence])] → [(doc_id, [per-token arrays])], one batched call
    (Kiwi analyses a whole chunk at once much faster than line by line)."""
    if splitter is not None:
        docs = [(i, [s for line in doc for s in splitter.split_sentences(line)]) for i, doc in docs]
    flat = [s for _, doc in docs for s in doc]
    encode_many = getattr(tok, "encode_many", None)
    encoded = iter(list(encode_many(flat)) if encode_many else [tok.encode(s) for s in flat])
    return [(i, [next(encoded) for _ in doc]) for i, doc in docs]


class ChunkWorker:
    """One chunk of documents → its train/eval shards and its marker, written
    to `out_dir` (default data.dir). Everything random is seeded by
    (data.seed, chunk index), so any process, pool or Beam worker that runs a
    chunk writes the same bytes."""

    def __init__(self, config, out_dir: str | None = None):
        self.config, self.out_dir = config, out_dir or config.data.dir
        self.tokenizer = pretraining_tokenizer(config)
        self.splitter = None
        if config.data.split_sentences:
            from kjax.morph.analyzer import KoreanAnalyzer
            self.splitter = KoreanAnalyzer()

    def _analyzer_counts(self) -> dict[str, int]:
        stats = getattr(getattr(self.tokenizer, "analyzer", None), "stats", None)
        if stats is None:
            return {"sentences_truncated": 0, "unknown_tags": 0}
        return {"sentences_truncated": stats.truncated + stats.skipped_long,
                "unknown_tags": stats.unknown_tags}

    def __call__(self, task) -> tuple[int, dict[str, int]]:
        chunk_index, docs = task
        config, d = self.config, self.config.data
        rng = np.random.default_rng([d.seed, chunk_index])
        before = self._analyzer_counts()
        tokenized = tokenize_documents(docs, self.tokenizer, self.splitter)
        counts = dict.fromkeys(CHUNK_COUNTS, 0)
        counts.update({k: v - before[k] for k, v in self._analyzer_counts().items()})
        counts["documents"] = len(docs)
        counts["tokens"] = sum(len(s["ids"]) for _, doc in tokenized for s in doc)
        counts["sentences_without_tokens"] = sum(not len(s["ids"]) for _, doc in tokenized
                                                 for s in doc)
        for split in ("train", "eval"):
            held_out = lambda doc_id: doc_id % d.eval_every_nth_doc == 0  # noqa: E731
            mine = [(i, doc) for i, doc in tokenized if held_out(i) == (split == "eval")]
            pool = mine if len(mine) > 1 else tokenized
            examples = []
            for doc_id, doc in mine:
                made = pairs_from_document(doc_id, doc, pool, rng, d.max_seq_len,
                                           d.short_seq_prob, d.nsp_prob)
                counts["documents_without_examples"] += not made  # e.g. nothing tokenized
                examples += made
            # Eval is always statically masked (one fixed copy) so its numbers are comparable.
            if split == "eval" or d.masking == "static":
                copies = 1 if split == "eval" else d.dupe_factor
                examples = [mask_example(ex, config,
                                         static_mask_rng(d.seed, split, chunk_index, n, dupe))
                            for dupe in range(copies) for n, ex in enumerate(examples)]
            records.write_shard(records.shard_path(self.out_dir, split, chunk_index), examples)
            counts[f"{split}_examples"] = len(examples)
            if split == "train":   # for the report's token fill, packed (train.packing) or not
                lengths = [len(ex["input_ids"]) for ex in examples]
                counts["train_example_tokens"] = sum(lengths)
                counts["train_packed_rows"] = packed_rows(lengths, d.max_seq_len,
                                                          config.train.batch_size)
        records.write_json(records.chunk_marker(self.out_dir, chunk_index), counts)  # "done"
        return chunk_index, counts


def _init_worker(config) -> None:
    _worker_state["worker"] = ChunkWorker(config)


def process_chunk(task) -> tuple[int, dict[str, int]]:
    """Tokenizes one chunk of documents and writes its shards (in a process
    set up by `_init_worker`)."""
    return _worker_state["worker"](task)


def _chunks(config, files, stats, docs_per_chunk):
    numbered = enumerate(iter_documents(files, stats, config.data.document_per_file))
    for chunk_index in itertools.count():
        docs = list(itertools.islice(numbered, docs_per_chunk))
        if not docs:
            return
        yield chunk_index, docs


# data keys that never change a shard (the mixture, dynamic masking's
# schedule, held-out masks drawn in the loader): left out of the fingerprint, so
# folders prepared before these keys existed still match.
NOT_IN_SHARDS = ("dir", "sources", "source_temperature", "mask_schedule", "final_masked_lm_prob",
                 "mask_schedule_steps", "eval_masked_lm_prob")


def fingerprint(config) -> dict:
    """What decides the shards' content: a resumed job must match it exactly."""
    tokenizer_hash = hashlib.sha256(paths.read_bytes(tokenizer_file(config))).hexdigest()[:16]
    data = {k: v for k, v in config.data.to_dict().items() if k not in NOT_IN_SHARDS}
    return {"data": data, "tokenizer": tokenizer_hash, "vocab_size": config.model.vocab_size}


def check_fingerprint(config) -> None:
    path = paths.join(config.data.dir, "fingerprint.json")
    mine = json.loads(json.dumps(fingerprint(config)))
    if paths.exists(path):
        if records.read_json(path) != mine:
            raise KjaxError(f"{config.data.dir} holds shards made with another data config or "
                            f"tokenizer; delete it or set data.dir to a new directory")
    else:
        records.write_json(path, mine)


def new_totals() -> dict[str, int]:
    return {**dict.fromkeys(CHUNK_COUNTS, 0), "chunks": 0, "chunks_reused": 0}


def add_counts(totals: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        totals[k] = totals.get(k, 0) + v


def _pending_chunks(config, files, stats, totals):
    """Chunks still to do; finished ones (a resumed job) are counted and skipped."""
    d = config.data
    for chunk_index, docs in _chunks(config, files, stats, d.docs_per_chunk):
        totals["chunks"] += 1
        marker = records.chunk_marker(d.dir, chunk_index)
        if paths.exists(marker):
            totals["chunks_reused"] += 1
            add_counts(totals, records.read_json(marker))
            continue
        yield chunk_index, docs


def _run_bounded(pool, fn, tasks, max_in_flight):
    """Like pool.map, but reads tasks lazily: at most max_in_flight chunks in memory."""
    in_flight = []
    for task in tasks:
        in_flight.append(pool.submit(fn, task))
        if len(in_flight) >= max_in_flight:
            yield in_flight.pop(0).result()
    for future in in_flight:
        yield future.result()


def corpus_sources(config) -> list:
    d = config.data
    return resolve_corpus(d.corpus, d.tfds_data_dir or None)


def pretraining_tokenizer(config):
    """The tokenizer of the examples. An imported vocabulary (`kjax import`:
    continued pretraining of a transformers model on new text) is taken when
    its specials sit at kjax's ids ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3,
    [MASK] 4), which pairs, masking and padding write; else refused in one line."""
    tok = load_tokenizer(config)
    specials = getattr(tok, "special_ids", None)
    if specials and specials != KJAX_SPECIAL_IDS:
        found = ", ".join(f"{role} {i}" for role, i in specials.items())
        raise KjaxError(f"{config.tokenizer.path}: the imported vocabulary's special tokens "
                        f"have the ids {found}; kjax's examples write pad 0, unk 1, cls 2, "
                        f"sep 3, mask 4, so kjax cannot pretrain on this vocabulary yet: "
                        f"fine-tune the imported model with `kjax finetune`")
    return tok


def check_inputs(config, sources) -> None:
    """Fail fast, before any work: tokenizer present and matching, >= 2 documents."""
    d = config.data
    pretraining_tokenizer(config)
    if len(list(itertools.islice(iter_documents(sources, None, d.document_per_file), 2))) < 2:
        raise KjaxError(f"data.corpus ({d.corpus}) has fewer than 2 documents; NSP needs "
                        f"at least 2 (separate documents with a blank line)")


def build_meta(config, stats: CorpusStats, totals: dict[str, int]) -> dict:
    """meta.json: the corpus report (skipped lines, documents with no usable
    line or no example) and the shapes the loader checks."""
    d = config.data
    slots = lambda rows: max(1, rows * d.max_seq_len)  # noqa: E731
    fill = {"token_fill": {   # real tokens / slots of the train rows
        "padded": round(totals.get("train_example_tokens", 0) /
                        slots(totals.get("train_examples", 0)), 4),
        "packed": round(totals.get("train_example_tokens", 0) /
                        slots(totals.get("train_packed_rows", 0)), 4)}}
    return {"corpus": stats.summary(), **fill, "documents": stats.documents,
            "sentences": stats.sentences, "skipped_lines": stats.skipped,
            "empty_documents": stats.empty_documents,
            "vocab_size": config.model.vocab_size, "max_seq_len": d.max_seq_len,
            "max_predictions_per_seq": d.max_predictions_per_seq, "masking": d.masking,
            "mask_unit": d.mask_unit, "tokenizer": config.tokenizer.to_dict(), **totals}


def prepare(config, num_workers: int = 1, progress: bool = True) -> dict:
    """meta.json of data.dir; with data.sources, {source: its meta.json}, each
    source that names a corpus prepared into its own folder (mixture.py)."""
    if has_sources(config):
        return mixture.prepare_sources(config, prepare, num_workers=num_workers,
                                       progress=progress)
    d = config.data
    files = corpus_sources(config)
    check_inputs(config, files)
    paths.makedirs(d.dir)
    check_fingerprint(config)
    stats = CorpusStats()
    totals = new_totals()
    tasks = _pending_chunks(config, files, stats, totals)
    # Progress in corpus bytes read (compressed for .gz), so it has a total and
    # an ETA; tfds sources have no size known ahead: count only.
    sizes = [paths.size(f) for f in files if isinstance(f, str)]
    bar = Progress("prepare", total=sum(sizes) if len(sizes) == len(files) else None,
                   unit="B", unit_scale=True, enabled=progress)
    if num_workers <= 1:
        _init_worker(config)
        results = map(process_chunk, tasks)
        pool = None
    else:
        # Spawned, not forked: the parent may hold threads (Kiwi's pool, JAX,
        # grain) that a forked child inherits broken.
        pool = cf.ProcessPoolExecutor(num_workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_init_worker, initargs=(config,))
        results = _run_bounded(pool, process_chunk, tasks, 2 * num_workers)
    for _, counts in results:
        add_counts(totals, counts)
        bar.set(stats.bytes_read, chunks=totals["chunks"],
                examples=totals.get("train_examples", 0))
    bar.set(stats.bytes_read, chunks=totals["chunks"], examples=totals.get("train_examples", 0))
    bar.close()
    if pool is not None:
        pool.shutdown()
    meta = build_meta(config, stats, totals)
    records.write_meta(d.dir, meta)
    return meta
