"""KLUE dev text for the pipeline benchmarks: NLI premises and hypotheses,
STS sentence pairs and NER sentences with the tags stripped, deduplicated
(each NLI premise comes with three hypotheses), in file order."""
from __future__ import annotations

import json
import os

KLUE_DIR = os.environ.get("KLUE_DIR", "/work/shared/data/klue")
SOURCES = ("nli", "sts", "ner")


def _nli(root):
    with open(os.path.join(root, "klue-nli-v1.1_dev.json"), encoding="utf-8") as f:
        return [s for row in json.load(f) for s in (row["premise"], row["hypothesis"])]


def _sts(root):
    with open(os.path.join(root, "klue-sts-v1.1_dev.json"), encoding="utf-8") as f:
        return [s for row in json.load(f) for s in (row["sentence1"], row["sentence2"])]


def _ner(root):
    """The TSV holds one character and its tag a line, a blank line between
    sentences and `##` comment lines; the characters rebuild the sentence."""
    sentences, chars = [], []
    with open(os.path.join(root, "klue-ner-v1.1_dev.tsv"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("##"):
                continue
            if "\t" in line:
                chars.append(line.split("\t")[0])
            elif chars:
                sentences.append("".join(chars).strip())
                chars = []
    if chars:
        sentences.append("".join(chars).strip())
    return sentences


def klue_sentences(sources=SOURCES, root: str = KLUE_DIR) -> list[str]:
    if not os.path.isdir(root):
        raise SystemExit(f"KLUE data not found in {root}; set KLUE_DIR to the folder holding "
                         f"klue-nli-v1.1_dev.json, klue-sts-v1.1_dev.json, klue-ner-v1.1_dev.tsv")
    readers = {"nli": _nli, "sts": _sts, "ner": _ner}
    out = [s for name in sources for s in readers[name](root)]
    return [s for s in dict.fromkeys(out) if s]


def write_corpus(path: str, sentences: list[str], sentences_per_doc: int = 8,
                 repeat: int = 1) -> str:
    """BERT's format: `sentences_per_doc` sentences a document (KLUE has no
    documents), the whole text `repeat` times."""
    docs = ["\n".join(sentences[i:i + sentences_per_doc])
            for i in range(0, len(sentences), sentences_per_doc)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs * repeat) + "\n")
    return path


KORQUAD_DIR = os.environ.get("KORQUAD_DIR", "/work/shared/data/korquad")


def korquad_contexts(root: str = KORQUAD_DIR) -> list[str]:
    """The distinct KorQuAD 1.0 dev paragraphs (Wikipedia text, not KLUE's
    sources): held-out text for vocabularies trained on KLUE."""
    path = os.path.join(root, "KorQuAD_v1.0_dev.json")
    if not os.path.isfile(path):
        raise SystemExit(f"KorQuAD not found: {path}; set KORQUAD_DIR to the folder holding "
                         f"KorQuAD_v1.0_dev.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return list(dict.fromkeys(p["context"].strip() for article in data
                              for p in article["paragraphs"] if p["context"].strip()))
