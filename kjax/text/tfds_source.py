"""TensorFlow Datasets as a corpus: `data.corpus = "tfds:NAME[/CONFIG][:SPLIT]"`.

    --config.data.corpus=tfds:wiki40b/ko            (split "train")
    --config.data.corpus=tfds:wiki40b/ko:validation --config.data.tfds_data_dir=/data/tfds

The dataset must already be prepared in `data.tfds_data_dir` (or tfds' own
default, `$TFDS_DATA_DIR` or ~/tensorflow_datasets): kjax never downloads
(`tfds build wiki40b/ko --data_dir DIR` prepares it). One example is one
document; its `text` feature becomes the document's lines.

wiki40b marks structure inside the text:

    _START_ARTICLE_\\nTitle\\n_START_SECTION_\\nHeading\\n_START_PARAGRAPH_\\nA._NEWLINE_B.

Article titles and section headings are dropped (they are not sentences and
would make odd NSP segments); each paragraph's `_NEWLINE_`-separated parts
become lines. Text without markers is split on newlines. Parsing works on
bytes, so a part that is not UTF-8 is counted and skipped like a file line.

TensorFlow is only in the `[tfds]` extra and is imported on first use.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterator

from kjax.errors import KjaxError, import_extra

PREFIX = "tfds:"
TEXT_FEATURE = "text"
_HEADING_MARKERS = (b"_START_ARTICLE_", b"_START_SECTION_")
_PARAGRAPH_MARKER = b"_START_PARAGRAPH_"
_NEWLINE_MARKER = b"_NEWLINE_"


@dataclasses.dataclass(frozen=True)
class TfdsSource:
    """One split of a prepared TFDS dataset; stands in for a file in a corpus."""
    name: str                   # "wiki40b/ko"
    split: str = "train"        # tfds split syntax: "train", "train[:10%]", ...
    data_dir: str | None = None

    def __str__(self) -> str:
        return f"{PREFIX}{self.name}:{self.split}"


def is_tfds_spec(part: str) -> bool:
    return part.startswith(PREFIX)


def parse_spec(part: str, data_dir: str | None = None) -> TfdsSource:
    """"tfds:wiki40b/ko:train" → TfdsSource("wiki40b/ko", "train", data_dir)."""
    name, _, split = part[len(PREFIX):].partition(":")
    name, split = name.strip(), split.strip() or "train"
    if not name or name.count("/") > 1 or ":" in re.sub(r"\[.*?\]", "", split):
        raise KjaxError(f"data.corpus: {part!r} is not tfds:NAME[/CONFIG][:SPLIT], "
                        f"e.g. tfds:wiki40b/ko or tfds:wiki40b/ko:validation")
    return TfdsSource(name, split, data_dir or None)


def import_tfds():
    return import_extra("tensorflow_datasets", "a tfds: data.corpus", "tfds")


def open_builder(source: TfdsSource):
    """The builder of a prepared dataset, or a KjaxError saying how to prepare it."""
    tfds = import_tfds()
    where = source.data_dir or "tfds' default data_dir ($TFDS_DATA_DIR or ~/tensorflow_datasets)"
    how = (f"kjax does not download: run `tfds build {source.name} --data_dir DIR` and set "
           f"--config.data.tfds_data_dir=DIR")
    try:
        builder = tfds.builder(source.name, data_dir=source.data_dir)
    except Exception as e:  # tfds raises several types for unknown names/configs
        raise KjaxError(f"data.corpus {source}: tfds cannot open {source.name!r} in {where} "
                        f"({str(e).splitlines()[0]}); {how}") from None
    if not builder.is_prepared():
        raise KjaxError(f"data.corpus {source}: {source.name} is not prepared in {where}; {how}")
    split_name = source.split.split("[")[0]
    if split_name not in builder.info.splits:
        raise KjaxError(f"data.corpus {source}: no split {split_name!r}; {source.name} has "
                        f"{', '.join(sorted(builder.info.splits))}")
    if TEXT_FEATURE not in builder.info.features:
        raise KjaxError(f"data.corpus {source}: no {TEXT_FEATURE!r} feature (it has "
                        f"{', '.join(builder.info.features)}); kjax reads text datasets only")
    return builder


def iter_texts(source: TfdsSource) -> Iterator[bytes]:
    """The raw `text` of every example, in the split's stored order (one file
    at a time, so the order and hence the prepared shards are reproducible)."""
    tfds = import_tfds()
    builder = open_builder(source)
    read_config = tfds.ReadConfig(interleave_cycle_length=1, try_autocache=False)
    ds = builder.as_dataset(split=source.split, shuffle_files=False, read_config=read_config)
    for example in tfds.as_numpy(ds):
        yield example[TEXT_FEATURE]


def document_lines(text: bytes) -> list[bytes]:
    """wiki40b-marked (or plain) text → its lines, headings dropped (see the
    module docstring). Lines are raw bytes; empty ones are left out."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    if _PARAGRAPH_MARKER not in text and not any(m in text for m in _HEADING_MARKERS):
        return [line for line in text.split(b"\n") if line.strip()]
    lines, after = [], None
    for line in text.split(b"\n"):
        stripped = line.strip()
        if stripped in _HEADING_MARKERS or stripped == _PARAGRAPH_MARKER:
            after = stripped
            continue
        if after in _HEADING_MARKERS:   # the title/heading line itself
            after = None
            continue
        lines += [part for part in line.split(_NEWLINE_MARKER) if part.strip()]
    return lines
