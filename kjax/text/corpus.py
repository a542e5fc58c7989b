"""Corpus reading in BERT's format: one sentence per line, a blank line
between documents. Plain files, globs and `.gz`; streamed line by line.
Local paths and URLs (`gs://bucket/corpus/*.txt.gz`) alike go through
kjax/paths.py, and a `tfds:NAME/CONFIG:SPLIT` part reads a prepared TFDS dataset
(kjax/text/tfds_source.py): each source stands in for a file.

A line that does not decode as UTF-8, or holds NUL bytes, is counted and
skipped (never a crash in a 10-hour job); `CorpusStats` reports them at the
end with the first few file:line locations so the user can look.

A damaged `.gz` (truncated, corrupt, or a plain file named .gz) is not a
crash either: the lines read before the damage are kept, the rest of that
file is skipped and counted as one "damaged .gz" skip, and the summary names
every such file with the line where reading stopped (docs/RECOVERY.md). If
nothing usable is left at all, the usual "no sentences" errors follow.
"""
from __future__ import annotations

import dataclasses
import glob
import gzip
import os
import zlib
from typing import Iterator

from kjax import paths
from kjax.errors import KjaxError
from kjax.text.normalize import normalize
from kjax.text.tfds_source import TfdsSource, document_lines, is_tfds_spec, iter_texts, parse_spec

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


# Korean text that ships inside packages from PyPI (no download at run time):
# the names data.corpus / tokenizer.corpus accept besides paths. Files are
# located through importlib, never by importing the package.
PACKAGE_CORPORA = {
    "konlpy": "KoNLPy's constitution + 10 National Assembly bills (0.13 MB legal prose; "
              "pip install konlpy, a kjax dependency)",
    "chatterbot-ko": "ChatterBot's Korean dialogues: 1,170 everyday utterances in 19 topics "
                     "(chatterbot-corpus, BSD, a kjax dependency)",
    "urimalsam": "969,324 headwords of the 우리말샘 dictionary, one a line (CC BY-SA 2.0 KR; "
                 "a word list, for vocabularies: pip install --no-deps wordextractor==0.2.1)",
    "libreoffice-ko": "LibreOffice's Korean help: 1,941 pages, 22k paragraphs, 0.9 M chars of "
                      "polite Korean prose (MPL-2.0; Debian's libreoffice-help-ko, fetched by "
                      "`make demo`: kjax/text/debian_corpus.py)",
}


def package_installed(name: str) -> bool:
    """Whether a package that holds a corpus is installed (never imported)."""
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _package_dir(name: str, install: str) -> str:
    import importlib.util
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise KjaxError(f"corpus {name!r} needs the {name} package, which is not installed; "
                        f"{install}")
    return list(spec.submodule_search_locations)[0]


def chatterbot_files() -> list[str]:
    """chatterbot-corpus's Korean YAML as text files, one utterance a line (a
    file per topic), converted once into the kjax cache (kjax/paths.py)."""
    import re
    root = os.path.join(_package_dir("chatterbot_corpus", "pip install chatterbot-corpus"),
                        "data", "korean")
    out_dir = os.path.join(paths.cache_root(), "corpora", "chatterbot-ko")
    out = []
    for source in sorted(glob.glob(os.path.join(root, "*.yml"))):
        target = os.path.join(out_dir, os.path.basename(source)[:-4] + ".txt")
        if not os.path.isfile(target):
            lines, talking = [], False
            for line in open(source, encoding="utf-8"):
                talking = talking or line.startswith("conversations:")
                item = re.match(r"^\s*-\s+(?:-\s+)?(.*\S)\s*$", line) if talking else None
                if item:
                    lines.append(item.group(1).strip("'\""))
            paths.write_text(target, "\n".join(lines) + "\n")   # whole or not at all
        out.append(target)
    return out


def urimalsam_files() -> list[str]:
    root = _package_dir("wordextractor", "pip install --no-deps wordextractor==0.2.1 "
                        "(`make demo` does)")
    return [os.path.join(root, "data", "urimalsam_headwords.txt.gz")]


def _package_corpus(name: str) -> list[str]:
    from kjax.text.debian_corpus import libreoffice_files
    return {"konlpy": demo_corpus_files, "chatterbot-ko": chatterbot_files,
            "urimalsam": urimalsam_files, "libreoffice-ko": libreoffice_files}[name]()


def _match(part: str) -> list[tuple[str, int]]:
    """(path, size) of the files a path/glob names, sorted by path."""
    try:
        return paths.glob(part)
    except KjaxError:
        raise
    except Exception as e:  # a missing bucket, no credentials, ...
        raise KjaxError(f"data.corpus: cannot list {part!r} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None


def resolve_corpus(spec: str, tfds_data_dir: str | None = None) -> list:
    """Comma-separated files/globs, PACKAGE_CORPORA names or tfds:NAME/CONFIG:SPLIT parts →
    the sources to read, in order: non-empty file paths and `TfdsSource`s."""
    if not spec or not spec.strip():
        raise KjaxError("data.corpus is empty; set --config.data.corpus=PATH_OR_GLOB "
                        "(one sentence per line, blank line between documents)")
    sources: list = []
    files: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in PACKAGE_CORPORA:
            matches = [(f, os.path.getsize(f)) for f in _package_corpus(part)]
        elif is_tfds_spec(part):
            sources.append(parse_spec(part, tfds_data_dir))
            continue
        else:
            matches = _match(part)
        if not matches:
            raise KjaxError(f"data.corpus: no file matches {part!r}; check the path or glob")
        files += [f for f, _ in matches]
        sources += [f for f, size in matches if size > 0]
    if not sources:
        raise KjaxError(f"data.corpus: every file is empty ({', '.join(files[:3])}...)")
    return sources


@dataclasses.dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    sentences: int = 0
    chars: int = 0
    bytes_read: int = 0       # of the files on disk (compressed for .gz): prepare's progress
    empty_documents: int = 0  # documents whose every line was skipped
    skipped: dict = dataclasses.field(default_factory=dict)   # reason → count
    examples_of_skips: list = dataclasses.field(default_factory=list)
    damaged_files: list = dataclasses.field(default_factory=list)  # "path:line: reason", all

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples_of_skips) < 5:
            self.examples_of_skips.append(f"{where}: {reason}")

    def merge(self, other: "CorpusStats") -> None:
        for f in ("files", "documents", "sentences", "chars", "empty_documents"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        self.examples_of_skips = (self.examples_of_skips + other.examples_of_skips)[:5]
        self.damaged_files += other.damaged_files

    def damaged(self, path: str, last_line: int, reason: str) -> None:
        """A compressed file that stops being readable after `last_line`."""
        self.skipped[DAMAGED_GZ] = self.skipped.get(DAMAGED_GZ, 0) + 1
        where = f"after line {last_line}" if last_line else "from its first byte"
        self.damaged_files.append(f"{path}: {reason} {where}; the rest of the file was skipped")

    def summary(self) -> str:
        skipped = ", ".join(f"{v} {k}" for k, v in sorted(self.skipped.items())) or "none"
        text = (f"{self.files} files, {self.documents} documents, {self.sentences} sentences, "
                f"{self.chars} chars; skipped lines: {skipped}")
        if self.empty_documents:
            text += f"; {self.empty_documents} documents had no usable line"
        if self.examples_of_skips:
            text += " (first: " + "; ".join(self.examples_of_skips) + ")"
        if self.damaged_files:
            text += "; damaged files: " + "; ".join(self.damaged_files)
        return text


DAMAGED_GZ = "damaged .gz (rest of file)"


def _gzip_damage(e: Exception) -> str:
    if isinstance(e, EOFError):
        return "truncated gzip stream"
    if "Not a gzipped file" in str(e):
        return "not gzip data (a plain file named .gz? rename it)"
    return f"corrupt gzip data ({e})"


def _lines(path: str, stats: CorpusStats):
    """(line number, raw bytes) of a file; a damaged .gz ends early, counted."""
    with _open(path) as f:
        disk = getattr(f, "fileobj", f)    # a .gz: the position in the compressed file
        base, lineno = stats.bytes_read, 0
        try:
            for lineno, raw in enumerate(f, 1):
                if lineno % 256 == 0:
                    stats.bytes_read = base + disk.tell()
                yield lineno, raw
            stats.bytes_read = base + disk.tell()
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            stats.damaged(path, lineno, _gzip_damage(e))


def _open(path: str):
    # .gz is decompressed here for local and remote files alike (one code path).
    raw = paths.open_file(path, "rb")
    return gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw


def clean_line(raw: bytes, stats: CorpusStats, where: str) -> str | None:
    """Bytes → normalised text (kjax/text/normalize.py), or None (counted)
    when the line must be skipped."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.skip("undecodable UTF-8", where)
        return None
    if "\x00" in text:
        stats.skip("NUL bytes", where)
        return None
    # Stripped before normalising: a line of control characters stays a (token-
    # less, counted) sentence as before, not a document boundary.
    text = normalize(text.strip().lstrip("\ufeff"))
    if len(text) > MAX_LINE_CHARS:
        stats.skip(f"longer than {MAX_LINE_CHARS} chars", where)
        return None
    return text


def iter_documents(sources: list, stats: CorpusStats | None = None,
                   document_per_file: bool = False) -> Iterator[list[str]]:
    """Yields documents as lists of sentences. CRLF and BOMs are tolerated.
    With `document_per_file`, blank lines are ignored and a file is one document
    (corpora such as KoNLPy's laws and bills put a blank line after every line).
    A `TfdsSource` yields one document per example."""
    stats = stats if stats is not None else CorpusStats()
    for source in sources:
        stats.files += 1
        if isinstance(source, TfdsSource):
            yield from _tfds_documents(source, stats)
        else:
            yield from _file_documents(source, stats, document_per_file)
    if not stats.sentences and stats.damaged_files:
        raise KjaxError(f"data.corpus: no usable sentence was read; damaged files: "
                        f"{'; '.join(stats.damaged_files)}")


def _file_documents(path: str, stats: CorpusStats, document_per_file: bool):
    doc: list[str] = []
    skipped_since_boundary = False
    for lineno, raw in _lines(path, stats):
        text = clean_line(raw, stats, f"{path}:{lineno}")
        if text is None:
            skipped_since_boundary = True
        elif text:
            doc.append(text)
            stats.sentences += 1
            stats.chars += len(text)
        elif not document_per_file:
            if doc:
                stats.documents += 1
                yield doc
            elif skipped_since_boundary:
                stats.empty_documents += 1
            doc, skipped_since_boundary = [], False
    if doc:  # a document never spans files
        stats.documents += 1
        yield doc
    elif skipped_since_boundary:
        stats.empty_documents += 1


def _tfds_documents(source: TfdsSource, stats: CorpusStats):
    for n, text in enumerate(iter_texts(source)):
        doc = [line for line in (clean_line(raw, stats, f"{source}#{n}")
                                 for raw in document_lines(text)) if line]
        stats.sentences += len(doc)
        stats.chars += sum(map(len, doc))
        if doc:
            stats.documents += 1
            yield doc
        else:  # an article with no paragraph text, or only skipped lines
            stats.empty_documents += 1


def iter_sentences(sources: list, stats: CorpusStats | None = None) -> Iterator[str]:
    for doc in iter_documents(sources, stats, document_per_file=True):
        yield from doc
