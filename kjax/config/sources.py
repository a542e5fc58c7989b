"""`data.sources`: the prepared sources a run mixes, read from the config in
one place (docs/PRETRAINING.md, "Source mixtures").

    data.sources = {
        "web":  {"corpus": "web/*.txt.gz", "weight": 0.7},   # prepared into data.dir/web
        "news": {"dir": "gs://b/news_examples", "weight": 0.3},   # prepared already
    }
    data.source_temperature = 0.0     # > 0: probability ∝ weight · examples^τ

A source is a folder of `kjax prepare` shards: its own `dir`, or
data.dir/NAME when it names only a `corpus` (what `kjax prepare` writes it
from). Sources are ordered by name, so a source's id (the per-row `source`
of a batch, the order of the counters) does not depend on how the file wrote
its dict. `data.sources = {}` (the default) is the one source data.dir,
exactly as before.

Weights: w_i >= 0, not all 0; a source of weight 0 is left out of the
sampling (its held-out loss is still reported). The weights the loader
samples by are w_i · n_i^τ with n_i the source's prepared train examples
(`kjax.batches.stream.mixture_weights`).
"""
from __future__ import annotations

import dataclasses
import math
import re

from kjax import paths
from kjax.errors import KjaxError

SOURCE_KEYS = ("dir", "corpus", "weight")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
EXAMPLE = "{'web': {'corpus': 'web/*.txt', 'weight': 0.7}, 'news': {'dir': 'runs/news', 'weight': 0.3}}"


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    dir: str       # the prepared shards
    corpus: str    # "" : prepared elsewhere (dir must hold them)
    weight: float


def has_sources(config) -> bool:
    return bool(len(config.data.get("sources", {})))


def sources(config) -> list[Source]:
    """The mixture's sources, by name; [] for the one source data.dir. Raises
    a one-line KjaxError for a malformed entry (check_sources)."""
    d = config.data
    out = []
    for name in sorted(d.get("sources", {})):
        entry = d.sources[name]
        if not hasattr(entry, "items"):
            raise KjaxError(f"data.sources[{name!r}]={entry!r}: give a dict of "
                            f"{', '.join(SOURCE_KEYS)}, e.g. data.sources={EXAMPLE}")
        unknown = sorted(set(entry) - set(SOURCE_KEYS))
        if unknown:
            raise KjaxError(f"data.sources.{name}: unknown key {unknown[0]!r}; a source has "
                            f"{', '.join(SOURCE_KEYS)}")
        if not NAME.fullmatch(str(name)):
            raise KjaxError(f"data.sources: {name!r} is not a source name; use letters, digits, "
                            f"- and _ (it names a folder and the metrics source/NAME/...)")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or \
                not math.isfinite(weight) or weight < 0:
            raise KjaxError(f"data.sources.{name}.weight={weight!r}: give a number >= 0")
        directory, corpus = str(entry.get("dir", "") or ""), str(entry.get("corpus", "") or "")
        if not directory and not corpus:
            raise KjaxError(f"data.sources.{name}: give its 'dir' (a prepared folder) or its "
                            f"'corpus' (`kjax prepare` prepares it into data.dir/{name})")
        out.append(Source(str(name), directory or paths.join(d.dir, str(name)), corpus,
                          float(weight)))
    return out


def check_sources(config) -> None:
    """The config alone: well-formed entries, weights not all 0, a temperature
    only with sources. Folders are checked where they are read (`kjax prepare`,
    the trainer's data check)."""
    found = sources(config)
    if not found:
        if config.data.get("source_temperature", 0.0):
            raise KjaxError(f"data.source_temperature={config.data.source_temperature} needs "
                            f"data.sources; set it to 0 or name the sources")
        return
    if not any(s.weight > 0 for s in found):
        raise KjaxError(f"data.sources: every weight is 0 ({', '.join(s.name for s in found)}); "
                        f"give at least one source a weight > 0")


def source_names(config) -> list[str]:
    return [s.name for s in sources(config)]
