"""Runs a checkpoint over texts and reports the norm-based analysis
(METHODS §3): a JSON report and PNG pictures in one directory.

Two runs of the same parameters: `unshaken` (bf = 0, plain attention) and,
when a boost factor is given or configured, `shaken` (Eq. 1 with that bf and
the config's B). The model computes in float32 here whatever `model.dtype`
it was trained with: the analysis compares small shares and correlations.

Pooling: see POOLING below (it is copied into every report).
"""
from __future__ import annotations

import json
import math
import os

import jax
import numpy as np

from kjax import paths
from kjax.analysis import inputs as text_inputs
from kjax.analysis.norms import analysis_norms, cv_per_head, key_share, spearman_per_head
from kjax.checkpoint.restore import restore_params
from kjax.config.load import copy_of
from kjax.errors import KjaxError
from kjax.inputs import input_mode
from kjax.progress import Progress

CORRELATION_CLASSES = text_inputs.CLASSES + ("all",)
# What each number of a report averages over (copied into every report).
POOLING = {
    "fx_norm_cv": "per (layer, head): std/mean of ||f^h(x_j)|| over every position j of every "
                  "text; per_layer: mean over heads; mean: over all (layer, head)",
    "spearman": "per (layer, head) and key class c: Spearman rho between alpha^h_ij and "
                "||f^h(x_j)|| over all (text, query i, key j in c) pairs pooled; per_layer / "
                "mean: averaged over heads / all (layer, head), skipping NaN (class absent)",
    "received": "per layer and class c: sum_{j in c} w_ij / sum_j w_ij averaged over every "
                "query i of every text; by_weight: w = alpha averaged over heads; by_norm: "
                "w = ||sum_h alpha^h_ij f^h(x_j)|| (the whole layer)",
    "postposition_to_substantive": "per postposition (its tokens as queries, its substantive's "
                "tokens as keys, as kjax.shake.matrix.pos_pairs pairs them): the same share, "
                "averaged over its query tokens, then over postpositions; per_head with "
                "alpha^h or ||alpha^h_ij f^h(x_j)||, per_layer with the whole-layer w; "
                "uniform_baseline: the share uniform attention would give",
}


# ---- texts ------------------------------------------------------------------------------

def read_texts(path: str | None, texts: list[str] | None, max_texts: int | None) -> list[str]:
    lines = list(texts or [])
    if path:
        if not paths.isfile(path):
            raise KjaxError(f"--texts {path!r} not found; pass a UTF-8 file with one text per "
                            f"line (a tab separates the two segments of a pair)")
        lines += paths.read_text(path).splitlines()
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise KjaxError("no texts to analyse: pass --texts FILE (one text per line) or "
                        "--text \"...\"")
    return lines[:max_texts] if max_texts else lines


# ---- running the model ------------------------------------------------------------------

def boost_factors(config, bf: float | None) -> tuple[float, ...]:
    """Per-layer bf of the shaken run: --bf, else the config's (all zero: no shaken run)."""
    layers = config.model.num_layers
    if bf is not None:
        return (float(bf),) * layers
    per_layer = tuple(config.model.shake_factor_per_layer or ())
    return tuple(float(x) for x in per_layer) or (float(config.model.shake_factor),) * layers


def check_pairs(config, items, bf: float | None) -> None:
    """A shaken run whose B is zero for every text would be the unshaken run
    again under another name: refused in one line."""
    if any(np.any(np.asarray(text_inputs.shake_matrix(item, item.length, config.shake, i),
                             np.float32)) for i, item in enumerate(items)):
        return
    given = f"--bf {bf:g}" if bf is not None else \
        f"model.shake_factor={config.model.shake_factor:g} (the config's)"
    variant = config.shake.variant if config.shake.variant != "none" else "pos"
    why = (f"tokenizer.scheme={config.tokenizer.scheme!r} has no POS tags, so variant "
           f"{variant!r} finds no postposition pairs" if config.tokenizer.scheme in
           ("sentencepiece", "imported") and variant == "pos" else
           f"shake.variant={variant!r} gives no pairs for these {len(items)} texts")
    raise KjaxError(f"kjax analyze {given}: nothing to shake ({why}); the shaken pictures "
                    f"would equal the unshaken ones. Analyse a morph-sp or multihot model, "
                    f"or drop --bf (and pass --bf 0 when the config sets model.shake_factor)")


def analysis_step(config, bf: tuple[float, ...]):
    """jit(params, batch) → the norms of kjax.analysis.norms.analysis_norms, all layers."""
    from kjax.train.state import make_model
    c = copy_of(config)
    c.model.dtype = "float32"
    c.model.shake_factor, c.model.shake_factor_per_layer = 0.0, tuple(bf)
    model = make_model(c, deterministic=True, return_analysis=True)

    @jax.jit
    def step(params, batch):
        _, analysis = model.apply(
            {"params": params}, batch["input_ids"], batch["token_type_ids"],
            batch["attention_mask"], position_ids=batch["position_ids"],
            shake=batch.get("shake"), multihot=batch.get("multihot"), method=model.encode)
        return analysis_norms(analysis["alpha"], analysis["fx"])
    return step


def run_texts(params, config, items, bf: tuple[float, ...], batch_size: int) -> list[dict]:
    """Per text: alpha [L, h, n, n], fx_norm [L, h, n], layer_alpha [L, n, n],
    layer_fx_norm [L, n], layer_weighted_norm [L, n, n] (n: its positions)."""
    step = analysis_step(config, bf)
    shaken = any(x != 0 for x in bf)
    longest = max(len(item.example["input_ids"]) for item in items)
    seq_len = min(config.data.max_seq_len, -(-longest // 8) * 8)   # few shapes, few compiles
    results = []
    bar = Progress(f"analyze ({'shaken' if shaken else 'unshaken'})", total=len(items),
                   unit="text")
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        filler = [chunk[0]] * (batch_size - len(chunk))   # one batch shape: one compile
        batch = text_inputs.model_batch(chunk + filler, start, seq_len, config, shaken)
        out = jax.device_get(step(params, batch))
        for b, item in enumerate(chunk):
            n = item.length
            results.append({
                "alpha": out["alpha"][:, b, :, :n, :n], "fx_norm": out["fx_norm"][:, b, :, :n],
                "layer_alpha": out["layer_alpha"][:, b, :n, :n],
                "layer_fx_norm": out["layer_fx_norm"][:, b, :n],
                "layer_weighted_norm": out["layer_weighted_norm"][:, b, :n, :n]})
        bar.update(len(chunk))   # device_get above: these texts are done
    bar.close()
    return results


# ---- statistics -------------------------------------------------------------------------

def _nanmean(x, axis=None):
    x = np.asarray(x, np.float64)
    counts = np.sum(~np.isnan(x), axis=axis)
    sums = np.nansum(x, axis=axis)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def postposition_shares(results, items) -> dict:
    """Share of each postposition's attention that reaches its substantive."""
    rows = {"head_weight": [], "head_norm": [], "layer_weight": [], "layer_norm": [],
            "uniform": []}
    for r, item in zip(results, items):
        head_norms = r["alpha"] * r["fx_norm"][..., None, :]
        for queries, keys in item.postpositions:
            rows["head_weight"].append(key_share(r["alpha"], queries, keys))
            rows["head_norm"].append(key_share(head_norms, queries, keys))
            rows["layer_weight"].append(key_share(r["layer_alpha"], queries, keys))
            rows["layer_norm"].append(key_share(r["layer_weighted_norm"], queries, keys))
            rows["uniform"].append(len(keys) / item.length)
    count = len(rows["uniform"])
    if not count:
        return {"count": 0, "note": "no postposition→substantive pairs: they need POS tags "
                "(tokenizer.scheme morph-sp or multihot) and texts with postpositions"}
    mean = {k: np.mean(np.stack(v), axis=0) for k, v in rows.items()}
    return {"count": count, "uniform_baseline": float(mean["uniform"]),
            "by_weight": {"per_layer": mean["layer_weight"], "per_head": mean["head_weight"]},
            "by_norm": {"per_layer": mean["layer_norm"], "per_head": mean["head_norm"]}}


def received_by_class(results, items) -> dict:
    """Per class and layer: the share of every query's attention it receives."""
    out = {}
    total_queries = sum(item.length for item in items)
    for c, name in enumerate(text_inputs.CLASSES):
        weight = norm = 0.0
        for r, item in zip(results, items):
            keys = np.flatnonzero(item.classes == c)
            everyone = np.arange(item.length)
            weight = weight + key_share(r["layer_alpha"], everyone, keys) * item.length
            norm = norm + key_share(r["layer_weighted_norm"], everyone, keys) * item.length
        out[name] = {"by_weight": weight / total_queries, "by_norm": norm / total_queries}
    return out


def summarize_run(results, items, bf) -> dict:
    alphas = [r["alpha"] for r in results]
    fx = [r["fx_norm"] for r in results]
    cv = cv_per_head(fx)
    correlations = {}
    for c, name in enumerate(CORRELATION_CLASSES):
        masks = [np.ones(item.length, bool) if name == "all" else item.classes == c
                 for item in items]
        rho = spearman_per_head(alphas, fx, masks)
        correlations[name] = {"per_head": rho, "per_layer": _nanmean(rho, axis=1),
                              "mean": float(_nanmean(rho))}
    return {"bf": list(bf),
            "fx_norm_cv": {"per_head": cv, "per_layer": _nanmean(cv, axis=1),
                           "mean": float(_nanmean(cv))},
            "spearman": correlations,
            "received": received_by_class(results, items),
            "postposition_to_substantive": postposition_shares(results, items)}


def jsonable(value):
    """numpy → lists; NaN/inf → null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


# ---- the whole analysis -----------------------------------------------------------------

def analyze(config, workdir: str, out_dir: str, texts: list[str], step: int | None = None,
            bf: float | None = None, sentence_index: int = 0, batch_size: int = 8) -> dict:
    """Writes `out_dir`/report.json and the PNGs; returns the report."""
    from kjax.analysis import plots
    from kjax.tokens.factory import load_tokenizer
    if not 0 <= sentence_index < len(texts):
        raise KjaxError(f"--sentence-index {sentence_index} is out of range: {len(texts)} "
                        f"texts were read (use 0..{len(texts) - 1})")
    if batch_size < 1:
        raise KjaxError(f"--batch-size {batch_size}: use 1 or more")
    tokenizer = load_tokenizer(config)
    mode = input_mode(config)   # its positions, position ids and model inputs (kjax/inputs)
    items = [text_inputs.encode_text(tokenizer, t, config.data.max_seq_len, mode) for t in texts]
    layers = config.model.num_layers
    shaken_bf = boost_factors(config, bf)
    runs = {"unshaken": (0.0,) * layers}
    if any(x != 0 for x in shaken_bf):
        check_pairs(config, items, bf)
        runs["shaken"] = shaken_bf
    params, step = restore_params(config, workdir, step)
    os.makedirs(out_dir, exist_ok=True)
    report = {
        "checkpoint": {"workdir": workdir if paths.is_remote(workdir) else
                       os.path.abspath(workdir), "step": int(step)},
        "model": {"layers": layers, "heads": config.model.num_heads,
                  "hidden_size": config.model.hidden_size, "scheme": config.tokenizer.scheme,
                  "input_mode": config.model.input_mode, "shake_variant": config.shake.variant},
        "texts": {"count": len(items), "truncated": sum(i.truncated for i in items),
                  "positions": sum(i.length for i in items),
                  "class_counts": {name: int(sum((i.classes == c).sum() for i in items))
                                   for c, name in enumerate(text_inputs.CLASSES)}},
        "pooling": POOLING,
        "runs": {},
        "sentence": {"index": sentence_index, "text": items[sentence_index].text,
                     "labels": items[sentence_index].labels,
                     "classes": [text_inputs.CLASSES[c] for c in items[sentence_index].classes]},
    }
    pictures = []
    item = items[sentence_index]   # its B: the pairs marked on every α panel
    marked = np.asarray(text_inputs.shake_matrix(item, item.length, config.shake,
                                                 sentence_index), np.float32)
    for name, run_bf in runs.items():
        results = run_texts(params, config, items, run_bf, batch_size)
        report["runs"][name] = summarize_run(results, items, run_bf)
        pictures += plots.sentence_heatmaps(results[sentence_index], items[sentence_index],
                                            name, run_bf, out_dir, marked)
    report = jsonable(report)
    pictures += plots.summary_plots(report, out_dir)
    report["pictures"] = [os.path.basename(p) for p in pictures]
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
    return report
