"""The `knowledge` section of `kjax inspect` (multihot scheme): per morpheme
position, the targets the loader would build (METHODS §2.5) — hypernym
tokens, whether a sense vector exists, and the verb-relation pointer.
Nothing is masked or sampled away here: every qualifying noun is listed.
"""
from __future__ import annotations

import numpy as np

from kjax.errors import KjaxError


def knowledge_section(text, config, tokenizer, encoded) -> dict | None:
    if tokenizer.scheme != "multihot":
        return None  # the knowledge objectives work on morpheme positions only
    from kjax.inputs.knowledge import KnowledgeTargets
    from kjax.knowledge.targets import knowledge_targets
    from kjax.tokens.sentencepiece import UNK
    try:
        builder = KnowledgeTargets(config, tokenizer)
    except KjaxError as e:
        return {"name": "knowledge", "rows": [], "note": f"resources not loadable: {e}"}
    example = encoded["example"]
    forms, tags = builder.morphemes(np.asarray(example["input_ids"]), example)
    n = len(forms)
    targets = knowledge_targets(forms, tags, builder.kb, tokenizer.token_to_id,
                                np.random.default_rng(0), n, max_hypernym=n, max_sense=n,
                                max_hypernyms_per_noun=config.knowledge.max_hypernyms_per_noun,
                                unk_id=UNK)
    hyp = {int(p): [tokenizer.id_to_token(int(t)) for t, ok in zip(ids, mask) if ok]
           for p, ids, mask, used in zip(targets["hyp_positions"], targets["hyp_targets"],
                                         targets["hyp_target_mask"], targets["hyp_mask"]) if used}
    sense = {int(p) for p, used in zip(targets["sense_positions"], targets["sense_mask"]) if used}
    verb = targets["verb_targets"]
    rows = []
    for p in range(n):
        if p in hyp or p in sense or verb[p] >= 0:
            rows.append({"#": p, "form": forms[p], "tag": tags[p],
                         "hypernyms": " ".join(hyp.get(p, [])) or "-",
                         "sense": "yes" if p in sense else "-",
                         "verb →": f"{forms[verb[p]]}@{verb[p]}" if verb[p] >= 0 else "-"})
    return {"name": "knowledge", "rows": rows,
            "note": f"resources: {builder.kb.describe()}; positions are morphemes "
                    f"([CLS] = 0)"}
