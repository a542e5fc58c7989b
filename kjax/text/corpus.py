"""Corpus reading in BERT's format: one sentence per line, a blank line
between documents. Plain files, globs and `.gz`; streamed line by line.

A line that does not decode as UTF-8, or holds NUL bytes, is counted and
skipped (never a crash in a 10-hour job); `CorpusStats` reports them at the
end with the first few file:line locations so the user can look.
"""
from __future__ import annotations

import dataclasses
import glob
import gzip
import os
import unicodedata
from typing import Iterator

from kjax.errors import KjaxError

DEMO_CORPUS = "konlpy"
MAX_LINE_CHARS = 100_000  # longer lines are skipped: no sentence is 100k chars


def demo_corpus_files() -> list[str]:
    """KoNLPy's wheel ships the Korean constitution and ten National Assembly
    bills as plain text: a real Korean corpus with no download at run time."""
    import konlpy  # imported lazily: only the demo needs it
    root = os.path.join(os.path.dirname(konlpy.__file__), "data", "corpus")
    files = sorted(glob.glob(os.path.join(root, "kolaw", "*.txt"))
                   + glob.glob(os.path.join(root, "kobill", "*.txt")))
    if not files:
        raise KjaxError(f"the demo corpus was not found under {root}; reinstall konlpy")
    return files


def resolve_corpus(spec: str) -> list[str]:
    """Comma-separated files/globs (or "konlpy") → existing, non-empty files."""
    if not spec or not spec.strip():
        raise KjaxError("data.corpus is empty; set --config.data.corpus=PATH_OR_GLOB "
                        "(one sentence per line, blank line between documents)")
    files: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part == DEMO_CORPUS:
            files += demo_corpus_files()
            continue
        matches = sorted(glob.glob(os.path.expanduser(part)))
        if not matches:
            raise KjaxError(f"data.corpus: no file matches {part!r}; check the path or glob")
        files += matches
    nonempty = [f for f in files if os.path.getsize(f) > 0]
    if not nonempty:
        raise KjaxError(f"data.corpus: every file is empty ({', '.join(files[:3])}...)")
    return nonempty


@dataclasses.dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    sentences: int = 0
    chars: int = 0
    skipped: dict = dataclasses.field(default_factory=dict)   # reason → count
    examples_of_skips: list = dataclasses.field(default_factory=list)

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples_of_skips) < 5:
            self.examples_of_skips.append(f"{where}: {reason}")

    def merge(self, other: "CorpusStats") -> None:
        for f in ("files", "documents", "sentences", "chars"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        self.examples_of_skips = (self.examples_of_skips + other.examples_of_skips)[:5]

    def summary(self) -> str:
        skipped = ", ".join(f"{v} {k}" for k, v in sorted(self.skipped.items())) or "none"
        text = (f"{self.files} files, {self.documents} documents, {self.sentences} sentences, "
                f"{self.chars} chars; skipped lines: {skipped}")
        if self.examples_of_skips:
            text += " (first: " + "; ".join(self.examples_of_skips) + ")"
        return text


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def clean_line(raw: bytes, stats: CorpusStats, where: str) -> str | None:
    """Bytes → NFC text, or None (counted) when the line must be skipped."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.skip("undecodable UTF-8", where)
        return None
    if "\x00" in text:
        stats.skip("NUL bytes", where)
        return None
    text = unicodedata.normalize("NFC", text.strip().lstrip("\ufeff"))
    if len(text) > MAX_LINE_CHARS:
        stats.skip(f"longer than {MAX_LINE_CHARS} chars", where)
        return None
    return text


def iter_documents(files: list[str], stats: CorpusStats | None = None,
                   document_per_file: bool = False) -> Iterator[list[str]]:
    """Yields documents as lists of sentences. CRLF and BOMs are tolerated.
    With `document_per_file`, blank lines are ignored and a file is one document
    (corpora such as KoNLPy's laws and bills put a blank line after every line)."""
    stats = stats if stats is not None else CorpusStats()
    for path in files:
        stats.files += 1
        doc: list[str] = []
        with _open(path) as f:
            for lineno, raw in enumerate(f, 1):
                text = clean_line(raw, stats, f"{path}:{lineno}")
                if text is None:
                    continue
                if text:
                    doc.append(text)
                    stats.sentences += 1
                    stats.chars += len(text)
                elif doc and not document_per_file:
                    stats.documents += 1
                    yield doc
                    doc = []
        if doc:  # a document never spans files
            stats.documents += 1
            yield doc


def iter_sentences(files: list[str], stats: CorpusStats | None = None) -> Iterator[str]:
    for doc in iter_documents(files, stats, document_per_file=True):
        yield from doc
