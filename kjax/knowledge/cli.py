"""`kjax knowledge stats`: how much of a corpus the knowledge resources cover.

    kjax knowledge stats --config tpu_configs/uknowbert_s.py \\
        --config.data.corpus='corpus/*.txt' [--max-docs 2000] [--json]

Reads the configured resources (knowledge.hypernyms / sense_vectors /
case_frames; "" = the samples in kjax/knowledge/data), analyses the corpus
with Kiwi and packs each document's morphemes into sequences of
data.max_seq_len - 3 positions (what a training example holds at most, less
[CLS] and two [SEP]). It then builds the targets exactly as the loader does
and reports: the share of nouns with hypernyms (and with hypernyms that are
single tokens of the vocabulary, which is what the hypernym head can
predict), with sense vectors, of predicates with case frames, which §2.5
rule found each verb's target, and the filled target slots per sequence.
Without a trained multihot tokenizer the vocabulary share is not reported.
"""
from __future__ import annotations

import itertools
import json

import numpy as np

from kjax.errors import KjaxError


def register(verbs, add_config) -> None:
    p = verbs.add_parser("knowledge", help="knowledge resources: coverage of a corpus (stats)")
    actions = p.add_subparsers(dest="knowledge_verb", required=True, metavar="ACTION")
    s = actions.add_parser("stats", help="share of corpus nouns with hypernyms / sense "
                           "vectors, predicates with case frames, targets per sequence")
    add_config(s)
    s.add_argument("--max-docs", type=int, default=2000,
                   help="analyse at most this many documents (default 2000; 0: all)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(handler=run_stats)


def _tokenizer_or_none(config):
    from kjax.tokens.factory import open_tokenizer
    if config.tokenizer.scheme != "multihot":
        return None
    try:
        return open_tokenizer(config)
    except KjaxError:  # not trained yet: coverage of the resources still counts
        return None


def morpheme_sequences(config, max_docs: int):
    """(forms, tags) per sequence of ≤ max_seq_len - 3 morphemes, document by
    document, as the examples would hold them."""
    from kjax.examples.prepare import corpus_sources
    from kjax.morph.analyzer import KoreanAnalyzer
    from kjax.text.corpus import iter_documents
    width = config.data.max_seq_len - 3
    analyzer = KoreanAnalyzer()
    documents = iter_documents(corpus_sources(config),
                               document_per_file=config.data.document_per_file)
    if max_docs:
        documents = itertools.islice(documents, max_docs)
    for doc in documents:
        forms, tags = [], []
        for morphemes in analyzer.analyze_many(doc):
            forms += [m.form for m in morphemes]
            tags += [m.tag for m in morphemes]
        for start in range(0, len(forms), width):
            yield forms[start:start + width], tags[start:start + width]


def knowledge_stats(config, max_docs: int = 2000) -> dict:
    from kjax.knowledge.resources import load_knowledge_base
    from kjax.knowledge.targets import coverage_stats
    from kjax.tokens.sentencepiece import UNK
    kb = load_knowledge_base(config)
    tokenizer = _tokenizer_or_none(config)
    token_to_id = tokenizer.token_to_id if tokenizer is not None else (lambda form: None)
    g = config.knowledge
    summary = coverage_stats(morpheme_sequences(config, max_docs), kb, token_to_id,
                             rng=np.random.default_rng(config.data.seed), unk_id=UNK,
                             max_hypernym=g.max_hypernym, max_sense=g.max_sense,
                             max_hypernyms_per_noun=g.max_hypernyms_per_noun)
    if summary["sequences"] == 0:
        raise KjaxError(f"data.corpus={config.data.corpus!r} gave no text to analyse")
    if tokenizer is None:  # hypernym slots need vocabulary tokens: not measurable
        for key in ("noun_token_hypernym_share", "mean_hyp_per_sequence"):
            summary[key] = None
    return {"resources": kb.describe(), "corpus": config.data.corpus,
            "vocabulary": None if tokenizer is None else config.tokenizer.path,
            "coverage": summary}


def format_stats(result: dict) -> str:
    lines = [f"resources: {result['resources']}", f"corpus: {result['corpus']}"]
    if result["vocabulary"] is None:
        lines.append("vocabulary: none (train the multihot tokenizer to see which hypernyms "
                     "the head can predict)")
    for key, value in result["coverage"].items():
        shown = "n/a" if value is None else (f"{value:.3f}" if isinstance(value, float)
                                             else str(value))
        lines.append(f"  {key:<28} {shown}")
    return "\n".join(lines)


def run_stats(args, config) -> int:
    result = knowledge_stats(config, args.max_docs)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json
          else format_stats(result))
    return 0
