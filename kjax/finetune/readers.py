"""Readers for the fine-tuning data: KLUE's own files and two generic ones.

    klue-nli   JSON list: premise, hypothesis, gold_label            (pair)
    klue-sts   JSON list: sentence1, sentence2, labels.label 0..5    (regress)
    klue-ynat  JSON list: title, label                               (classify)
    klue-ner   TSV: "## guid<TAB>annotated text" then one "char<TAB>tag" line
               per character (spaces too), a blank line between sentences
    jsonl      one object per line; json: a list of such objects. Keys:
               text|sentence|sentence1|premise|title, optional
               text_b|sentence2|hypothesis, label|gold_label|labels.label|score;
               NER: text + tags (one per character) or entities
               ([start, end, type] or {start, end, label}, end exclusive)
    tsv        text<TAB>label or text_a<TAB>text_b<TAB>label; a first row whose
               last column is "label" is a header naming the columns

`--format auto` picks by extension and, for JSON, by the keys present.
Every error names the file, the line (or item) and the fix. What a record
means (a class name, a score, NER tags, choices, WiC spans), which formats
a task reads and what it checks are the task's own: the readers take the
task object (kjax/finetune/contract.py) and call it back, so they import no
task and no registry.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Iterator, Sequence

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.finetune.bio import spans_to_tags

FORMATS = ("auto", "klue-nli", "klue-sts", "klue-ynat", "klue-ner", "json", "jsonl", "tsv",
           "squad")
TEXT_A_KEYS = ("text", "sentence", "sentence1", "text_a", "premise", "title", "document")
TEXT_B_KEYS = ("text_b", "sentence2", "hypothesis", "question")
LABEL_KEYS = ("label", "gold_label", "labels", "score", "answer")
# choice: the alternatives (NIKL CoPA's columns "1", "2"); the label is the
# right one's 1-based number (or its text)
CHOICE_KEYS = ("1", "2", "3", "4", "5", "choice1", "choice2", "choice3", "choice4", "choice5")
NLI_LABELS = ("entailment", "neutral", "contradiction")   # KLUE's order


@dataclasses.dataclass
class Example:
    guid: str
    text_a: str
    text_b: str | None = None
    label: object = None                      # class name, score (regress), answers (qa)
    char_tags: tuple[str, ...] | None = None  # ner: one BIO tag per character of text_a
    where: str = ""                           # "file:line" for messages
    group: str = ""                           # qa: its article (splits keep articles whole)
    impossible: bool = False                  # qa: unanswerable (KLUE-MRC is_impossible)
    choices: tuple = ()                       # choice: the alternatives
    target_spans: tuple = ()                  # wic: the target word's span in a and in b


def read_examples(path: str, task, fmt: str = "auto") -> list[Example]:
    """Every example of `path` as `task` (a task object; the registry's
    finetune_task(name) gives it) reads and checks them."""
    if fmt not in FORMATS:
        raise KjaxError(f"--format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not paths.isfile(path):
        raise KjaxError(f"data file {path!r} not found; pass --train/--dev/--test FILE")
    fmt = task.detect_format(path) if fmt == "auto" else fmt
    examples = task.read(path, fmt)
    if not examples:
        raise KjaxError(f"{path}: no examples found (format {fmt}); check the file and --format")
    for ex in examples:
        task.check(ex)
    return examples


def read_generic(path: str, task, fmt: str) -> list[Example]:
    """The JSON / JSONL / TSV readers; `task` (kjax/finetune/contract.py) makes
    each record an Example."""
    if fmt == "tsv":
        return list(_read_tsv(path, task))
    return [_from_record(rec, task, where) for rec, where in _records(path, fmt)]


def klue_ner_file(path: str) -> bool:
    """Whether the file opens with KLUE-NER's comment header."""
    with paths.open_file(path, "r", encoding="utf-8") as f:
        return f.readline().startswith("## ")


def _records(path: str, fmt: str) -> Iterator[tuple[dict, str]]:
    with paths.open_file(path, "r", encoding="utf-8") as f:
        if fmt == "jsonl":
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield _parse_json(line, f"{path}:{n}"), f"{path}:{n}"
            return
        text = f.read()
    data = _parse_json(text, path)
    lines = _item_lines(text) if isinstance(data, list) else None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise KjaxError(f"{path}: expected a JSON list of examples (KLUE style), got "
                        f"{type(data).__name__}; use --format jsonl for one object per line")
    for i, rec in enumerate(data):
        yield rec, (f"{path}:{lines[i]}" if lines else f"{path} item {i}")


_SPACE = re.compile(r"[ \t\n\r]*")


def _item_lines(text: str) -> list[int] | None:
    """The line on which each item of a top-level JSON list starts, so that
    errors in a KLUE file name file:line; None if the scan goes astray."""
    decoder, lines = json.JSONDecoder(), []
    pos = _SPACE.match(text).end() + 1                  # past "["
    line, counted = 1, 0
    try:
        while True:
            pos = _SPACE.match(text, pos).end()
            if pos >= len(text) or text[pos] == "]":
                return lines
            line += text.count("\n", counted, pos)
            counted = pos
            lines.append(line)
            _, pos = decoder.raw_decode(text, pos)
            pos = _SPACE.match(text, pos).end()
            if pos < len(text) and text[pos] == ",":
                pos += 1
    except (json.JSONDecodeError, IndexError):
        return None


def _parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise KjaxError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column "
                        f"{e.colno}); fix the file or pass the right --format") from None


def _first(rec: dict, keys: Sequence[str]):
    for k in keys:
        if k in rec:
            return rec[k]
    return None


def _from_record(rec, task, where: str) -> Example:
    if not isinstance(rec, dict):
        raise KjaxError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    guid = str(rec.get("guid", rec.get("id", where)))
    where = f"{where} (guid {guid})" if "guid" in rec else where
    text_a, text_b = _first(rec, TEXT_A_KEYS), _first(rec, TEXT_B_KEYS)
    if not isinstance(text_a, str):
        raise KjaxError(f"{where}: no text; give one of the keys {', '.join(TEXT_A_KEYS)} "
                        f"(a string)")
    if text_b is not None and not isinstance(text_b, str):
        raise KjaxError(f"{where}: the second text must be a string")
    return task.from_record(rec, text_a, text_b, guid, where)


def record_label(rec: dict, where: str):
    """The record's label, as found (the task parses it)."""
    label = _first(rec, LABEL_KEYS)
    if isinstance(label, dict):                       # KLUE-STS: labels.label
        label = label.get("label", label.get("real-label"))
    if label is None:
        raise KjaxError(f"{where}: no label; give one of the keys {', '.join(LABEL_KEYS)}")
    return label


def choice_example(rec, text_a, text_b, label, guid, where) -> Example:
    """Multiple choice (NIKL CoPA: sentence, question 원인/결과, 1, 2, Answer):
    text_a the premise (its question appended), label the 0-based right choice."""
    choices = tuple(str(rec[k]) for k in CHOICE_KEYS if k in rec)
    if len(choices) < 2:
        raise KjaxError(f"{where}: --task choice needs two or more alternatives (keys "
                        f"{', '.join(CHOICE_KEYS[:2])}, ...)")
    value = str(label).strip()
    index = int(value) - 1 if value.isdigit() else (choices.index(value) if value in choices
                                                    else -1)
    if not 0 <= index < len(choices):
        raise KjaxError(f"{where}: answer {label!r} is neither a choice number 1..{len(choices)} "
                        f"nor one of the choices")
    premise = f"{text_a} {text_b}" if text_b else text_a
    return Example(guid, premise, None, index, None, where, choices=choices)


def ner_tags(rec: dict, text: str, where: str) -> tuple[str, ...]:
    if "tags" in rec:
        return tuple(str(t) for t in rec["tags"])
    spans = []
    for e in rec.get("entities", []):
        if isinstance(e, dict):
            e = (e.get("start"), e.get("end"), e.get("label", e.get("type")))
        if (not isinstance(e, (list, tuple)) or len(e) != 3 or not isinstance(e[0], int)
                or not isinstance(e[1], int) or not 0 <= e[0] < e[1] <= len(text)):
            raise KjaxError(f"{where}: entity {e!r} must be [start, end, type] with "
                            f"0 <= start < end <= {len(text)} (character offsets, end exclusive)")
        spans.append((e[0], e[1], str(e[2])))
    if "entities" not in rec:
        raise KjaxError(f"{where}: --task ner needs 'tags' (one per character) or 'entities'")
    return tuple(spans_to_tags(len(text), sorted(spans)))


def read_klue_ner(path: str) -> Iterator[Example]:
    """Blocks separated by blank lines; `## ` lines are comments, the last one
    holding a tab names the sentence (its guid); the rest are char<TAB>tag."""
    def flush(block, start_line):
        guid, chars, tags = None, [], []
        for n, line in block:
            if line.startswith("## "):
                if "\t" in line:
                    guid, start_line = line[3:].split("\t", 1)[0], n
                continue
            if not chars and guid is None:
                start_line = n
            char, sep, tag = line.rpartition("\t")
            if not sep or len(char) != 1:
                raise KjaxError(f"{path}:{n}: expected one character, a tab and a BIO tag "
                                f"(KLUE-NER format), got {line!r}")
            chars.append(char)
            tags.append(tag)
        if chars:
            where = f"{path}:{start_line}"
            yield Example(guid or where, "".join(chars), None, None, tuple(tags), where)

    block, start = [], 1
    with paths.open_file(path, "r", encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if line == "":
                yield from flush(block, start)
                block, start = [], n + 1
            else:
                block.append((n, line))
    yield from flush(block, start)


def _read_tsv(path: str, task) -> Iterator[Example]:
    with paths.open_file(path, "r", encoding="utf-8") as f:
        rows = [(n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(f, 1)
                if line.strip()]
    columns = None
    if rows and rows[0][1][-1].strip().lower() in ("label", "score", "gold_label", "answer",
                                                   "end_s2"):   # NIKL WiC's last column
        columns = [c.strip().lower() for c in rows[0][1]]
        rows = rows[1:]
    for n, cells in rows:
        where = f"{path}:{n}"
        if columns is not None:
            if len(cells) != len(columns):
                raise KjaxError(f"{where}: {len(cells)} columns but the header has "
                                f"{len(columns)} ({', '.join(columns)})")
            rec = dict(zip(columns, cells))
        elif len(cells) in (2, 3):
            rec = dict(zip(("text", "label") if len(cells) == 2 else
                           ("text", "text_b", "label"), cells))
        else:
            raise KjaxError(f"{where}: {len(cells)} tab-separated columns; expected "
                            f"text<TAB>label or text_a<TAB>text_b<TAB>label")
        yield _from_record(rec, task, where)


def split_examples(examples: Sequence[Example], fractions: Sequence[float],
                   seed: int) -> list[list[Example]]:
    """Seeded split into len(fractions) parts (the last takes the rounding).
    Examples of one `group` (a QA article) stay on one side, so no paragraph
    is both trained and scored; fractions then count groups."""
    groups = list(dict.fromkeys(ex.group or i for i, ex in enumerate(examples)))
    members = {}
    for i, ex in enumerate(examples):
        members.setdefault(ex.group or i, []).append(i)
    order = np.random.default_rng(seed).permutation(len(groups))
    bounds = np.round(np.cumsum(fractions)[:-1] / sum(fractions) * len(groups)).astype(int)
    return [[examples[i] for g in part for i in members[groups[g]]]
            for part in np.split(order, bounds)]

