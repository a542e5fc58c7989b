"""Open lexical-knowledge files for UKnowBERT (METHODS §2.5), replacing the
non-public UWordMap. The formats are documented in kjax/knowledge/data/README.md;
in short, UTF-8 text (a BOM at the start and CRLF line ends are tolerated;
NUL bytes and BOMs anywhere else are errors), one entry per
line, `#` comments and blank lines skipped, two TAB-separated columns:

    hypernyms.tsv       lemma<TAB>hypernym,hypernym,...    일가_02/NNG	가족,경지,현상
    sense_vectors.tsv   lemma<TAB>v1 v2 ... vd             칫솔/NNG	0.12 -0.40 ...
    case_frames.tsv     lemma<TAB>particle,particle,...    마시다/VV	을,를

A lemma is `form[_NN]/TAG`: a homograph number of two digits (as in the
Standard Korean Dictionary, `일가_02`) and a Sejong/Kiwi POS tag. No number
means homograph 00, "unspecified". Every problem raises `ResourceError`
naming `file:line`, what is wrong and how to fix it.

Lookups take analyser output, which has no homograph numbers:
- hypernyms: the union over the homographs of (form, tag), in homograph
  order, duplicates removed — a sampled noun learns every sense's hypernyms;
- sense vector: the homograph with the lowest number (00 first), so the
  choice never depends on the order of lines in the file;
- case frame: the union of the homographs' particles, widened by allomorphs
  (을↔를↔ᆯ, 이↔가, 은↔는↔ᆫ, 와↔과, 로↔으로, 랑↔이랑): Kiwi writes whichever
  the preceding syllable needs, a frame names the case.
- the tag must match exactly, else any tag of the same class (substantive or
  predicate) is tried, in tag-inventory order: analysers disagree on NNG/NNP
  and VV/VA far more often than on meaning.
Case-frame predicates may be written as stem (`마시/VV`) or -다 form
(`마시다/VV`); both are stored as the stem Kiwi produces (`마시`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import unicodedata
from typing import Callable, NamedTuple, TypeVar

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.morph.tags import TAGS, base_tag, is_known_tag, pos_class

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SAMPLE_FILES = {"hypernyms": "hypernyms.tsv", "sense_vectors": "sense_vectors.tsv",
                "case_frames": "case_frames.tsv"}

_HOMOGRAPH = re.compile(r"_(\d\d)$")
_FRAME_TAGS = frozenset({"VV", "VA", "VX", "VCP", "VCN"})
_ALLOMORPHS = ({"을", "를", "ᆯ"}, {"이", "가"}, {"은", "는", "ᆫ"}, {"와", "과"},
               {"로", "으로"}, {"랑", "이랑"}, {"라", "이라"}, {"나", "이나"})
_ALLOMORPH_OF = {p: frozenset(group) for group in _ALLOMORPHS for p in group}

T = TypeVar("T")


class ResourceError(KjaxError):
    """A knowledge file is malformed; the message names `file:line`."""


class LemmaKey(NamedTuple):
    form: str
    homograph: int     # 0 = unspecified
    tag: str           # base tag, conjugation suffix (-R/-I) stripped

    def __str__(self) -> str:
        number = f"_{self.homograph:02d}" if self.homograph else ""
        return f"{self.form}{number}/{self.tag}"


def parse_lemma(text: str) -> LemmaKey:
    """`일가_02/NNG` → LemmaKey('일가', 2, 'NNG'). Raises ValueError with the fix."""
    text = unicodedata.normalize("NFC", text.strip())
    form, slash, tag = text.rpartition("/")
    if not slash or not form or not tag:
        raise ValueError(f"lemma {text!r} is not form/TAG; write it like 일가_02/NNG or 칫솔/NNG")
    if not is_known_tag(tag):
        raise ValueError(f"unknown POS tag {tag!r} in {text!r}; use a Sejong/Kiwi tag "
                         f"such as NNG, NNP, VV, VA (kjax/morph/tags.py lists them)")
    homograph = 0
    if "_" in form:
        match = _HOMOGRAPH.search(form)
        if not match:
            raise ValueError(f"bad homograph number in {text!r}; write two digits after "
                             f"'_' (일가_02/NNG) or leave it out (일가/NNG)")
        homograph, form = int(match.group(1)), form[:match.start()]
    if not form or any(c.isspace() for c in form):
        raise ValueError(f"empty form or whitespace in lemma {text!r}")
    return LemmaKey(form, homograph, base_tag(tag))


def predicate_stem(form: str, tag: str) -> str:
    """`마시다` → `마시`: case frames may be written in dictionary form."""
    if tag in _FRAME_TAGS and len(form) > 1 and form.endswith("다"):
        return form[:-1]
    return form


def _read_rows(path: str):
    """Yields (line_number, first_column, second_column) of data lines."""
    try:
        raw_lines = paths.read_bytes(path).split(b"\n")   # local or a URL (gs://...)
    except OSError as error:
        raise ResourceError(f"{path}: cannot read knowledge file ({error.strerror or error}); "
                            f"check the path in the config") from None
    for number, raw in enumerate(raw_lines, start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as error:
            raise ResourceError(f"{path}:{number}: not UTF-8 ({error.reason} at byte "
                                f"{error.start}); re-save the file as UTF-8") from None
        # Checked before comments and blank lines: either means the file was
        # damaged or concatenated, wherever it sits.
        if "\x00" in line:
            raise ResourceError(f"{path}:{number}: NUL byte at column {line.index(chr(0)) + 1}; "
                                f"the file is damaged or not text: re-export it as UTF-8 text")
        if "\ufeff" in line:
            raise ResourceError(f"{path}:{number}: byte-order mark (U+FEFF) at column "
                                f"{line.index(chr(0xFEFF)) + 1} (files concatenated with their "
                                f"BOMs?); remove it: a BOM may only open the file")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        columns = line.rstrip().split("\t")
        if len(columns) != 2:
            raise ResourceError(f"{path}:{number}: expected 2 TAB-separated columns "
                                f"(lemma, value), found {len(columns)}; separate the "
                                f"lemma from its value with exactly one TAB")
        yield number, columns[0], columns[1]


def _split_list(path: str, number: int, value: str, what: str) -> tuple[str, ...]:
    items = [unicodedata.normalize("NFC", item.strip()) for item in value.split(",")]
    if not value.strip() or any(not item for item in items):
        raise ResourceError(f"{path}:{number}: empty {what} in {value!r}; write a "
                            f"comma-separated list without empty items")
    if any(any(c.isspace() for c in item) for item in items):
        raise ResourceError(f"{path}:{number}: whitespace inside a {what} in {value!r}; "
                            f"separate items with commas only")
    return tuple(dict.fromkeys(items))          # de-duplicated, order kept


def _load_table(path: str, parse_value: Callable[[int, str], T],
                normalise: Callable[[LemmaKey], LemmaKey] = lambda key: key) -> dict[LemmaKey, T]:
    table: dict[LemmaKey, T] = {}
    first_line: dict[LemmaKey, int] = {}
    for number, lemma, value in _read_rows(path):
        try:
            key = normalise(parse_lemma(lemma))
        except ValueError as error:
            raise ResourceError(f"{path}:{number}: {error}") from None
        if key in table:
            raise ResourceError(f"{path}:{number}: duplicate lemma {key} (first on line "
                                f"{first_line[key]}); merge the two lines into one")
        table[key], first_line[key] = parse_value(number, value), number
    return table


def load_hypernyms(path: str) -> dict[LemmaKey, tuple[str, ...]]:
    """lemma → hypernym forms. A hypernym may be written as a lemma
    (`가족_01/NNG`); only its form is kept — the target is a vocabulary token."""
    def parse(number: int, value: str) -> tuple[str, ...]:
        forms = []
        for item in _split_list(path, number, value, "hypernym"):
            if "/" in item:
                try:
                    item = parse_lemma(item).form
                except ValueError as error:
                    raise ResourceError(f"{path}:{number}: {error}") from None
            forms.append(item)
        return tuple(dict.fromkeys(forms))
    return _load_table(path, parse)


def load_sense_vectors(path: str) -> dict[LemmaKey, np.ndarray]:
    """lemma → float32 vector; the first entry fixes the dimension d."""
    dimension: list[int] = []     # set by the first data line

    def parse(number: int, value: str) -> np.ndarray:
        fields = value.split()
        try:
            vector = np.array([float(f) for f in fields], np.float32)
        except ValueError:
            bad = next(f for f in fields if not _is_float(f))
            raise ResourceError(f"{path}:{number}: non-numeric vector component {bad!r}; "
                                f"write space-separated decimal numbers") from None
        if not fields or not all(math.isfinite(v) for v in vector):
            raise ResourceError(f"{path}:{number}: empty vector or NaN/inf component; "
                                f"every component must be a finite number")
        if not dimension:
            dimension.append(len(vector))
        elif len(vector) != dimension[0]:
            raise ResourceError(f"{path}:{number}: vector has {len(vector)} components but "
                                f"the first entry has {dimension[0]}; all vectors in a "
                                f"file must have the same dimension")
        return vector
    return _load_table(path, parse)


def load_case_frames(path: str) -> dict[LemmaKey, frozenset[str]]:
    """predicate stem lemma → particles it takes (as written; see case_frame())."""
    def normalise(key: LemmaKey) -> LemmaKey:
        if key.tag not in _FRAME_TAGS:
            raise ValueError(f"case frames are for predicates, but {key} has tag "
                             f"{key.tag}; use one of {', '.join(sorted(_FRAME_TAGS))}")
        return key._replace(form=predicate_stem(key.form, key.tag))
    return _load_table(path, lambda number, value: frozenset(
        _split_list(path, number, value, "particle")), normalise)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _index_by_form_tag(table: dict[LemmaKey, T]) -> dict[tuple[str, str], list[T]]:
    """(form, tag) → values in homograph order: the lookups below ignore numbers."""
    index: dict[tuple[str, str], list[tuple[int, T]]] = {}
    for key, value in table.items():
        index.setdefault((key.form, key.tag), []).append((key.homograph, value))
    return {k: [v for _, v in sorted(pairs, key=lambda p: p[0])] for k, pairs in index.items()}


_TAG_ORDER = {t: i for i, t in enumerate(TAGS)}


def _derived():
    return dataclasses.field(init=False, repr=False, default=None)


@dataclasses.dataclass(frozen=True, eq=False)
class KnowledgeBase:
    """The three resources of METHODS §2.5; any may be empty."""
    hypernyms: dict[LemmaKey, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    sense_vectors: dict[LemmaKey, np.ndarray] = dataclasses.field(default_factory=dict)
    case_frames: dict[LemmaKey, frozenset[str]] = dataclasses.field(default_factory=dict)
    sense_dim: int = dataclasses.field(init=False, default=0)   # 0 when no vectors
    _hypernyms_index: dict = _derived()
    _sense_vectors_index: dict = _derived()
    _case_frames_index: dict = _derived()
    _forms: dict = _derived()   # name → form → its tags in TAGS order (the fallback's lookup)

    def __post_init__(self):
        dims = {len(v) for v in self.sense_vectors.values()}
        if len(dims) > 1:
            raise ResourceError(f"sense vectors of different dimensions {sorted(dims)}; "
                                f"use one dimension for all entries")
        object.__setattr__(self, "sense_dim", dims.pop() if dims else 0)
        forms: dict[str, dict[str, list[str]]] = {}
        for name in ("hypernyms", "sense_vectors", "case_frames"):
            index = _index_by_form_tag(getattr(self, name))
            object.__setattr__(self, f"_{name}_index", index)
            by_form = forms.setdefault(name, {})
            for form, tag in index:
                by_form.setdefault(form, []).append(tag)
            for tags in by_form.values():
                tags.sort(key=lambda t: _TAG_ORDER.get(t, len(_TAG_ORDER)))
        object.__setattr__(self, "_forms", forms)

    @classmethod
    def load(cls, hypernyms: str | None = None, sense_vectors: str | None = None,
             case_frames: str | None = None) -> "KnowledgeBase":
        """Loads the files given (None → that resource is empty)."""
        return cls(load_hypernyms(hypernyms) if hypernyms else {},
                   load_sense_vectors(sense_vectors) if sense_vectors else {},
                   load_case_frames(case_frames) if case_frames else {})

    @classmethod
    def load_samples(cls) -> "KnowledgeBase":
        """The small samples shipped in kjax/knowledge/data/ (the demo's KB)."""
        return cls.load(**{k: os.path.join(DATA_DIR, f) for k, f in SAMPLE_FILES.items()})

    def _entries(self, name: str, form: str, tag: str, homograph: int | None) -> list:
        form, tag = unicodedata.normalize("NFC", form), base_tag(tag)
        if homograph is not None:
            key = LemmaKey(form, homograph, tag)
            value = getattr(self, name).get(key)
            return [] if value is None else [value]
        index = getattr(self, f"_{name}_index")
        if (form, tag) in index:
            return index[(form, tag)]
        kind = pos_class(tag)
        if kind == "other":
            return []
        # the first tag of the same class in TAGS order (a dict lookup, not a scan:
        # the loader asks this for every noun and predicate of every example)
        similar = next((t for t in self._forms[name].get(form, ()) if pos_class(t) == kind),
                       None)
        return index[(form, similar)] if similar is not None else []

    def hypernyms_of(self, form: str, tag: str, homograph: int | None = None) -> tuple[str, ...]:
        """Hypernym forms; without a homograph number, the union of all homographs."""
        found = self._entries("hypernyms", form, tag, homograph)
        return tuple(dict.fromkeys(h for entry in found for h in entry))

    def sense_vector_of(self, form: str, tag: str,
                        homograph: int | None = None) -> np.ndarray | None:
        """The sense vector; without a homograph number, the lowest-numbered one."""
        found = self._entries("sense_vectors", form, tag, homograph)
        return found[0] if found else None

    def case_frame_of(self, form: str, tag: str) -> frozenset[str] | None:
        """Particles the predicate takes, allomorphs included; None if unknown.
        `form` may be the stem (analyser output) or the -다 form."""
        tag = base_tag(tag)
        found = self._entries("case_frames", predicate_stem(form, tag), tag, None)
        if not found:
            return None
        return frozenset(a for frame in found for p in frame
                         for a in _ALLOMORPH_OF.get(p, (p,)))

    def describe(self) -> dict[str, int]:
        return {"hypernym_entries": len(self.hypernyms),
                "sense_vector_entries": len(self.sense_vectors),
                "sense_dim": self.sense_dim, "case_frame_entries": len(self.case_frames)}


def load_knowledge_base(config) -> KnowledgeBase:
    """The resources `config.knowledge` names ("" = the samples shipped with
    kjax), checked against knowledge.sense_dim when the sense head is on."""
    g = config.knowledge
    files = {key: g[key] or os.path.join(DATA_DIR, name) for key, name in SAMPLE_FILES.items()}
    kb = KnowledgeBase.load(**files)
    if g.sense_weight > 0 and kb.sense_dim != g.sense_dim:
        raise KjaxError(f"{files['sense_vectors']} has {kb.sense_dim}-dim vectors but "
                        f"knowledge.sense_dim={g.sense_dim}; set --config.knowledge.sense_dim="
                        f"{kb.sense_dim}")
    return kb
