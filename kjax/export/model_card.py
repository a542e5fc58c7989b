"""The README.md (model card) `kjax export` writes: what was trained, on
what, for how long, how it ended, and code that runs as written
(tests/test_export.py executes every ```python block of exported cards).
"""
from __future__ import annotations

import os

from kjax.config.mask_schedule import scheduled
from kjax.config.sources import sources
from kjax.export import multihot_export as mx
from kjax.model.config import EncoderConfig
from kjax.objectives import objectives_title, reported_metrics, trained_head_params
from kjax.pretrain.phases import describe, read_lineage

EXAMPLE = "대한민국의 수도는 서울이다."
MASKED = "대한민국의 수도는 [MASK]이다."
MASKED_GLUED = "저는 커피[MASK] 좋아합니다."   # a particle: one piece in any vocabulary


def corpus_text(config) -> str:
    """The corpus, or a mixture's sources and weights (data.sources)."""
    found = sources(config)
    if not found:
        return f"`{config.data.corpus}`"
    tau = config.data.source_temperature
    return "a mixture of " + ", ".join(f"`{s.name}` ({s.weight:g})" for s in found) + (
        f", weights × examples^{tau:g}" if tau else "")


def masking_text(d) -> str:
    """"15 %" or a schedule's "30 % → 15 % (linear)"."""
    if not scheduled(d):
        return f"{d.masked_lm_prob:.0%}"
    return f"{d.masked_lm_prob:.0%} → {d.final_masked_lm_prob:.0%} ({d.mask_schedule})"


def _last_metrics(workdir: str) -> dict[str, dict]:
    from kjax.train.logdir import read_run_metrics
    last: dict[str, dict] = {}
    try:
        for record in read_run_metrics(workdir):
            last[record.get("split", "train")] = record
    except (OSError, ValueError):
        pass  # a card without metrics beats no export
    return last


def lineage_lines(workdir: str) -> list[str]:
    """Where the run's parameters came from, parent by parent (kjax/pretrain/phases.py)."""
    lines, lineage = [], read_lineage(workdir)
    while lineage:
        if "averaged" in lineage:   # `kjax average`: its sources, each with its fingerprint
            fingerprints = ", ".join(s["fingerprint"] for s in lineage["averaged"])
            lines.append(f"- {describe(lineage)} (checkpoint fingerprints {fingerprints})")
            break
        lines.append(f"- started {describe(lineage)} (checkpoint fingerprint "
                     f"{lineage['parent_fingerprint']})")
        lineage = lineage.get("parent_lineage")
    return lines


def usage(folder: str, multihot: bool, remote_tokenizer: bool, with_heads: bool,
          new_pooler: bool = False) -> list[str]:
    """The card's code: load, encode, (with heads) predict masked tokens, and
    the sequence-classification class to fine-tune (`new_pooler`: the folder
    has none, the classifier starts one). Lines of one python block."""
    model_remote = ", trust_remote_code=True" if multihot else ""
    tok_remote = ", trust_remote_code=True" if remote_tokenizer else ""
    lines = ["import torch",
             "from transformers import (AutoModel, AutoModelForMaskedLM,",
             "                          AutoModelForQuestionAnswering,",
             "                          AutoModelForSequenceClassification, AutoTokenizer)",
             "",
             f"folder = {folder!r}",
             f"tokenizer = AutoTokenizer.from_pretrained(folder{tok_remote})",
             f"model = AutoModel.from_pretrained(folder{model_remote}).eval()"]
    if multihot:   # one position per morpheme: the tokenizer builds the multi-hot arrays
        lines += [f"inputs = tokenizer.multihot_inputs([{EXAMPLE!r}], return_tensors=\"pt\")",
                  "with torch.no_grad():",
                  "    hidden = model(**inputs).last_hidden_state   # [1, morphemes, hidden]"]
    else:
        lines += [f"inputs = tokenizer({EXAMPLE!r}, return_tensors=\"pt\")",
                  "with torch.no_grad():",
                  "    hidden = model(**inputs).last_hidden_state   # [1, tokens, hidden]"]
    lines.append("print(hidden.shape)")
    if with_heads and multihot:
        lines += ["",
                  "# The MLM head: logits per morpheme position over the token vocabulary",
                  "# (kjax trains them with the multi-target loss of METHODS Eq. 7-9).",
                  f"mlm = AutoModelForMaskedLM.from_pretrained(folder{model_remote}).eval()",
                  "with torch.no_grad():",
                  "    logits = mlm(**inputs).logits                  # [1, morphemes, vocab]",
                  "print(tokenizer.convert_ids_to_tokens(logits[0, 1].topk(5).indices.tolist()))"]
    elif with_heads and not remote_tokenizer:
        lines += ["",
                  "# Fill-mask with the pretrained MLM head (`kjax fill-mask` answers the same)",
                  "from transformers import pipeline",
                  "fill = pipeline(\"fill-mask\", model=folder)",
                  f"for answer in fill({MASKED_GLUED!r}, top_k=5):",
                  "    print(answer[\"token_str\"], round(answer[\"score\"], 3), "
                  "answer[\"sequence\"])"]
    elif with_heads:
        lines += ["",
                  "# Fill-mask with the pretrained MLM head",
                  f"mlm = AutoModelForMaskedLM.from_pretrained(folder).eval()",
                  f"masked = tokenizer({MASKED!r}, return_tensors=\"pt\")",
                  "at = (masked[\"input_ids\"][0] == tokenizer.mask_token_id).nonzero()[0, 0]",
                  "with torch.no_grad():",
                  "    logits = mlm(**masked).logits[0, at]",
                  "print(tokenizer.convert_ids_to_tokens(logits.topk(5).indices.tolist()))"]
    lines += ["",
              "# Fine-tuning starts here: the encoder plus a new "
              + ("pooler and classification head (no NSP: the pooler never trained)"
                 if new_pooler else "classification head"),
              "classifier = AutoModelForSequenceClassification.from_pretrained(",
              f"    folder, num_labels=3{model_remote})",
              "with torch.no_grad():",
              "    print(classifier(**inputs).logits.shape)           # [1, 3]",
              "# ... or a new extractive-QA head: start/end logits per "
              + ("morpheme position" if multihot else "token"),
              f"qa = AutoModelForQuestionAnswering.from_pretrained(folder{model_remote})",
              "with torch.no_grad():",
              "    print(\"QA start logits:\", qa(**inputs).start_logits.shape)"]
    return lines


def write_model_card(config, workdir: str, out_dir: str, step: int, architecture: str,
                     with_heads: bool, dtype: str, tokenizer: dict,
                     shown_as: str | None = None, pooler: bool = True,
                     weights: str = "params") -> str:
    """README.md: what was trained, on what, for how long, and how it ended
    (`shown_as`: the folder's name in the usage lines, when written elsewhere;
    `pooler`: whether the folder holds one; `weights`: params or ema). Only the objectives the run's
    config turned on are named and reported, only heads that trained written."""
    m, d, t = config.model, config.data, config.train
    enc = EncoderConfig.from_config(m)
    multihot = mx.is_multihot(enc)
    trained = objectives_title(config)
    # An MLM-only run's pooler (trained only by NSP) and NSP head are not written.
    # (ELECTRA has no pooler to speak of.)
    new_pooler = (not pooler and not enc.projects_embeddings
                  and "pooler" not in trained_head_params(config))
    lines = ["---", "language: ko", "library_name: transformers", "tags: [bert, kjax, korean]",
             *(["pipeline_tag: fill-mask"] if with_heads else []),
             "---", f"# {config.name} (kjax export, step {step})", "",
             f"A BERT encoder pretrained with kjax ({trained}), exported at step {step} of "
             f"{t.num_steps} as {architecture} ({dtype})" + (
                 (", with its pretraining heads (MLM + NSP)."
                  if architecture.endswith("ForPreTraining") else ", with its MLM head.")
                 if with_heads else ", encoder only.") + (
                 " NSP did not train, so neither its head nor the pooler is written: "
                 "AutoModel and AutoModelForSequenceClassification load a newly initialised "
                 "pooler (reported as such), which fine-tuning trains with the new head."
                 if new_pooler else ""),
             "", "## Model",
             f"{m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads, FFN "
             f"{m.intermediate_size}, vocabulary {m.vocab_size}, max positions "
             f"{m.max_position_embeddings}; post-LN, exact GELU. SHAKE boost factor "
             f"{m.shake_factor_per_layer or m.shake_factor}." + (
                 " Multi-hot input generator (UKnowBERT, METHODS Eq. 3–4): one position per "
                 "morpheme, in modeling_kjax_multihot.py; knowledge heads are not exported."
                 if multihot else ""), "",
             "## Training",
             f"- objectives: {trained}",
             f"- corpus: {corpus_text(config)}; examples: max_seq_len {d.max_seq_len}, "
             f"{masking_text(d)} masking of `{d.mask_unit}` units ({d.masking})",
             f"- batch {t.batch_size}" + (f" ({t.microbatches} microbatches a step)"
                                          if t.microbatches > 1 else "")
             + f", {t.optimizer}, learning rate {t.learning_rate} ({t.schedule}), warmup "
             f"{t.warmup_steps}, weight decay {t.weight_decay}",
             *lineage_lines(workdir),
             *([f"- weights: the exponential moving average of the parameters "
                f"(train.ema_decay {t.ema_decay}), not the step's parameters"]
               if weights == "ema" else []),
             f"- tokenizer: `{config.tokenizer.scheme}` → {tokenizer['class']}", ""]
    metrics = _last_metrics(workdir)
    if metrics:
        lines += ["## Last metrics", "| split | step | metric | value |", "|---|---|---|---|"]
        for split, record in sorted(metrics.items()):
            for key in reported_metrics(config):
                if isinstance(record.get(key), (int, float)):
                    lines.append(f"| {split} | {record.get('step')} | {key} | {record[key]:.4f} |")
        lines.append("")
    remote_tokenizer = config.tokenizer.scheme != "sentencepiece"
    lines += ["## Use", "```python",
              *usage(shown_as or out_dir, multihot, remote_tokenizer, with_heads, new_pooler),
              "```", ""]
    if remote_tokenizer:
        lines += [f"The `{config.tokenizer.scheme}` tokenizer runs Kiwi through kjax's own "
                  f"code (`pip install kjax`), hence trust_remote_code.", ""]
    lines += ["Attention-logit shaking (METHODS Eq. 1): `import kjax.export.torch_shake`, load "
              "with `attn_implementation=\"kjax_shake\"` and pass `shake_matrix=B` to `forward`.",
              "", "## Training config", "```", config.to_json_best_effort(indent=1)
              if hasattr(config, "to_json_best_effort") else str(config), "```", ""]
    path = os.path.join(out_dir, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path
