"""`kjax prepare`: corpus → tokenized documents → pair examples → shards.

Streamed and memory-bounded: documents are read in chunks of
`data.docs_per_chunk`; each chunk becomes one train shard (and one eval
shard for its held-out documents), so memory never holds more than a chunk.
NSP negatives are drawn from other documents of the same chunk.

Every random choice is seeded by (data.seed, chunk index), so the output
does not depend on how many worker processes run, and a finished shard is
skipped when a killed job is started again.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import json
import os

import numpy as np
from tqdm import tqdm

from kjax.errors import KjaxError
from kjax.examples import records
from kjax.examples.masking import choose_masks, example_rng, unit_key
from kjax.examples.pairs import pairs_from_document
from kjax.text.corpus import CorpusStats, iter_documents, resolve_corpus
from kjax.tokens.factory import load_tokenizer, tokenizer_file

_worker_state: dict = {}


def add_static_masks(example: dict, config, rng: np.random.Generator) -> dict:
    d = config.data
    key = unit_key(config)
    masked, positions, targets = choose_masks(
        example["input_ids"], example[key] if key else None,
        example["word_ids"] >= 0, rng, d.masked_lm_prob, d.max_predictions_per_seq,
        config.model.vocab_size)
    return {**example, "input_ids": masked, "mlm_positions": positions, "mlm_ids": targets}


def _init_worker(config) -> None:
    _worker_state["config"] = config
    _worker_state["tokenizer"] = load_tokenizer(config)
    if config.data.split_sentences:
        from kjax.morph.analyzer import KoreanAnalyzer
        _worker_state["splitter"] = KoreanAnalyzer()


def tokenize_documents(docs, tok, splitter=None):
    """[(doc_id, [sentence])] → [(doc_id, [per-token arrays])], one batched call
    (Kiwi analyses a whole chunk at once much faster than line by line)."""
    if splitter is not None:
        docs = [(i, [s for line in doc for s in splitter.split_sentences(line)]) for i, doc in docs]
    flat = [s for _, doc in docs for s in doc]
    encode_many = getattr(tok, "encode_many", None)
    encoded = iter(list(encode_many(flat)) if encode_many else [tok.encode(s) for s in flat])
    return [(i, [next(encoded) for _ in doc]) for i, doc in docs]


def process_chunk(task) -> tuple[int, dict[str, int]]:
    """Tokenizes one chunk of documents and writes its shards."""
    chunk_index, docs = task
    config, tok = _worker_state["config"], _worker_state["tokenizer"]
    d = config.data
    rng = np.random.default_rng([d.seed, chunk_index])
    tokenized = tokenize_documents(docs, tok, _worker_state.get("splitter"))
    counts = {"tokens": sum(len(s["ids"]) for _, doc in tokenized for s in doc)}
    for split in ("train", "eval"):
        held_out = lambda doc_id: doc_id % d.eval_every_nth_doc == 0  # noqa: E731
        mine = [(i, doc) for i, doc in tokenized if held_out(i) == (split == "eval")]
        pool = mine if len(mine) > 1 else tokenized
        examples = []
        for doc_id, doc in mine:
            examples += pairs_from_document(doc_id, doc, pool, rng, d.max_seq_len,
                                            d.short_seq_prob, d.nsp_prob)
        # Eval is always statically masked (one fixed copy) so its numbers are comparable.
        if split == "eval" or d.masking == "static":
            copies = 1 if split == "eval" else d.dupe_factor
            examples = [add_static_masks(ex, config, example_rng(d.seed, n, dupe))
                        for dupe in range(copies) for n, ex in enumerate(examples)]
        records.write_shard(records.shard_path(d.dir, split, chunk_index), examples)
        counts[f"{split}_examples"] = len(examples)
    records.write_json(records.chunk_marker(d.dir, chunk_index), counts)  # "chunk done"
    return chunk_index, counts


def _chunks(config, files, stats, docs_per_chunk):
    numbered = enumerate(iter_documents(files, stats, config.data.document_per_file))
    for chunk_index in itertools.count():
        docs = list(itertools.islice(numbered, docs_per_chunk))
        if not docs:
            return
        yield chunk_index, docs


def fingerprint(config) -> dict:
    """What decides the shards' content: a resumed job must match it exactly."""
    with open(tokenizer_file(config), "rb") as f:
        tokenizer_hash = hashlib.sha256(f.read()).hexdigest()[:16]
    data = {k: v for k, v in config.data.to_dict().items() if k != "dir"}
    return {"data": data, "tokenizer": tokenizer_hash, "vocab_size": config.model.vocab_size}


def check_fingerprint(config) -> None:
    path = os.path.join(config.data.dir, "fingerprint.json")
    mine = json.loads(json.dumps(fingerprint(config)))
    if os.path.exists(path):
        if records.read_json(path) != mine:
            raise KjaxError(f"{config.data.dir} holds shards made with another data config or "
                            f"tokenizer; delete it or set data.dir to a new directory")
    else:
        records.write_json(path, mine)


def _pending_chunks(config, files, stats, totals):
    """Chunks still to do; finished ones (a resumed job) are counted and skipped."""
    d = config.data
    for chunk_index, docs in _chunks(config, files, stats, d.docs_per_chunk):
        totals["chunks"] += 1
        marker = records.chunk_marker(d.dir, chunk_index)
        if os.path.exists(marker):
            totals["chunks_reused"] += 1
            for k, v in records.read_json(marker).items():
                totals[k] += v
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


def prepare(config, num_workers: int = 1, progress: bool = True) -> dict:
    d = config.data
    files = resolve_corpus(d.corpus)
    load_tokenizer(config)  # fail fast on a missing tokenizer or vocab mismatch
    if len(list(itertools.islice(iter_documents(files, None, d.document_per_file), 2))) < 2:
        raise KjaxError(f"data.corpus ({d.corpus}) has fewer than 2 documents; NSP needs "
                        f"at least 2 (separate documents with a blank line)")
    os.makedirs(d.dir, exist_ok=True)
    check_fingerprint(config)
    stats = CorpusStats()
    totals = {"train_examples": 0, "eval_examples": 0, "tokens": 0, "chunks": 0,
              "chunks_reused": 0}
    tasks = _pending_chunks(config, files, stats, totals)
    bar = tqdm(desc="prepare", unit="chunk", disable=not progress)
    if num_workers <= 1:
        _init_worker(config)
        results = map(process_chunk, tasks)
        pool = None
    else:
        pool = cf.ProcessPoolExecutor(num_workers, initializer=_init_worker, initargs=(config,))
        results = _run_bounded(pool, process_chunk, tasks, 2 * num_workers)
    for _, counts in results:
        for k, v in counts.items():
            totals[k] += v
        bar.update()
    bar.close()
    if pool is not None:
        pool.shutdown()
    meta = {"corpus": stats.summary(), "documents": stats.documents,
            "sentences": stats.sentences, "skipped_lines": stats.skipped,
            "vocab_size": config.model.vocab_size, "max_seq_len": d.max_seq_len,
            "max_predictions_per_seq": d.max_predictions_per_seq, "masking": d.masking,
            "mask_unit": d.mask_unit, "tokenizer": config.tokenizer.to_dict(), **totals}
    records.write_meta(d.dir, meta)
    return meta
