"""A run's data folders (docs/PRETRAINING.md, "Source mixtures"): data.dir,
or each source of `data.sources` (kjax/config/sources.py) — prepared by
`kjax prepare` each into its own folder, checked before anything compiles,
and evaluated each on its own held-out split.

Held-out evaluation of a mixture reports every source's metrics
(`eval/NAME/mlm_loss`, ...) and the pooled ones (`eval/mlm_loss`: every
source's held-out examples together, each source's first
train.eval_batches batches, as if they were one set).
"""
from __future__ import annotations

from kjax import paths
from kjax.config.sources import sources
from kjax.errors import KjaxError
from kjax.examples import records


def data_folders(config) -> list[tuple[str, str]]:
    """(source name, prepared folder): ("", data.dir) for the one source."""
    found = sources(config)
    return [(s.name, s.dir) for s in found] or [("", config.data.dir)]


def _named(name: str, directory: str) -> str:
    return f"data.sources.{name} ({directory})" if name else directory


def check_prepared(config) -> list[dict]:
    """Every folder's meta.json, each matching the config's shapes (one
    line otherwise; the config may have more prediction slots than prepare:
    its stored masks fit them, and dynamic masking at a higher rate needs
    them); a mixture's sources need their train and held-out splits."""
    d, m = config.data, config.model
    metas = []
    for name, directory in data_folders(config):
        if name and not paths.isfile(paths.join(directory, records.META_FILE)):
            how = (f"run `kjax prepare --config ...` (it prepares its corpus there)"
                   if any(s.corpus for s in sources(config) if s.name == name) else
                   f"give it a 'corpus' for `kjax prepare`, or its 'dir' of prepared shards")
            raise KjaxError(f"data.sources.{name}: {directory} holds no prepared data; {how}")
        meta = records.read_meta(directory)
        for key, want in (("vocab_size", m.vocab_size), ("max_seq_len", d.max_seq_len),
                          ("max_predictions_per_seq", d.max_predictions_per_seq)):
            # more slots than prepare's hold its stored masks (a higher dynamic rate)
            more_slots = key == "max_predictions_per_seq" and meta.get(key, want + 1) < want
            if meta.get(key) != want and not more_slots:
                section = "model" if key == "vocab_size" else "data"
                raise KjaxError(f"{_named(name, directory)} was prepared with {key}="
                                f"{meta.get(key)} but the config has {section}.{key}={want}; run "
                                f"`kjax prepare` again or set --config.{section}.{key}="
                                f"{meta.get(key)}")
        if name and not meta.get("train_examples"):
            raise KjaxError(f"data.sources.{name} ({directory}) has no train examples; give it "
                            f"more text or leave it out")
        if name and not meta.get("eval_examples"):
            raise KjaxError(f"data.sources.{name} ({directory}) has no held-out split (0 eval "
                            f"examples), so its loss cannot be reported; prepare it again with a "
                            f"lower data.eval_every_nth_doc or more documents")
        metas.append(meta)
    return metas


def source_config(config, source):
    """The config `kjax prepare` prepares one source with: its corpus into its
    folder, nothing else changed."""
    c = config.copy_and_resolve_references()
    c.data.sources = {}
    c.data.corpus, c.data.dir = source.corpus, source.dir
    return c


def prepare_sources(config, prepare, **kwargs) -> dict:
    """`prepare(config, **kwargs)` for every source that names a corpus, each
    into its own folder; a source given only as a prepared `dir` is checked
    for its meta.json. Returns {name: its meta.json} ("prepared": False for
    the ones taken as they are)."""
    out = {}
    for source in sources(config):
        if source.corpus:
            out[source.name] = prepare(source_config(config, source), **kwargs)
        elif paths.isfile(paths.join(source.dir, records.META_FILE)):
            out[source.name] = {**records.read_meta(source.dir), "prepared": False}
        else:
            raise KjaxError(f"data.sources.{source.name}: {source.dir} holds no prepared data "
                            f"and the source names no 'corpus' to prepare it from; give one")
    return out


def evaluate(config, batches, step_sums, summarize) -> dict:
    """Held-out metrics: `batches(directory)` gives a folder's eval batches,
    `step_sums(batch)` the eval step's sums of one, `summarize(sums)` the
    metrics of a list of them (kjax/train/step.py summarize_eval). One
    source: its metrics. A mixture: the pooled metrics and NAME/metric of
    every source."""
    parts = {}
    for name, directory in data_folders(config):
        sums = [step_sums(b) for b in batches(directory)]
        if not sums:
            raise KjaxError(f"no eval examples in {directory}; lower data.eval_every_nth_doc")
        parts[name] = sums
    if "" in parts:
        return summarize(parts[""])
    result = summarize([s for sums in parts.values() for s in sums])
    for name, sums in parts.items():
        result.update({f"{name}/{k}": v for k, v in summarize(sums).items()})
    return result
