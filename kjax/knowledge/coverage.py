"""How much of a corpus the knowledge resources cover (`kjax knowledge
stats`, kjax/cli/knowledge.py prints it): the corpus analysed with Kiwi and
packed into sequences of data.max_seq_len - 3 morphemes, the targets built
exactly as the loader builds them (METHODS §2.5)."""
from __future__ import annotations

import itertools

import numpy as np

from kjax.errors import KjaxError
from kjax.knowledge.resources import load_knowledge_base
from kjax.knowledge.targets import coverage_stats
from kjax.morph.analyzer import KoreanAnalyzer
from kjax.text.corpus import iter_documents, resolve_corpus
from kjax.tokens.factory import open_tokenizer
from kjax.tokens.sentencepiece import UNK


def _tokenizer_or_none(config):
    if config.tokenizer.scheme != "multihot":
        return None
    try:
        return open_tokenizer(config)
    except KjaxError:  # not trained yet: coverage of the resources still counts
        return None


def morpheme_sequences(config, max_docs: int):
    """(forms, tags) per sequence of ≤ max_seq_len - 3 morphemes, document by
    document, as the examples would hold them."""
    width = config.data.max_seq_len - 3
    analyzer = KoreanAnalyzer()
    d = config.data
    documents = iter_documents(resolve_corpus(d.corpus, d.tfds_data_dir or None),
                               document_per_file=d.document_per_file)
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
