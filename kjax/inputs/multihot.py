"""`multihot`: UKnowBERT's input (METHODS §2.3) — one position per morpheme,
its input Σ_i E_tok[t_i] ⊙ E_inpos[i] + E_pos + E_postag (Eq. 3–4), summed by
the model from the flat token stream (kjax/inputs/segments.py). The
knowledge objectives (§2.5) work on these positions, so their targets are
built here, per example, when a knowledge weight is > 0."""
from __future__ import annotations

from kjax.config.validate import knowledge_enabled
from kjax.inputs.segments import SegmentMode


class Multihot(SegmentMode):
    name = "multihot"
    embedding = "segment_sum_inpos_postag"
    schemes = ("multihot",)
    why_schemes = "positions are its morphemes"
    knowledge_positions = True
    positions_are_morphemes = True
    export_format = "kjax_multihot"

    def loader_resources(self, config) -> dict:
        if not knowledge_enabled(config):
            return {}
        from kjax.inputs.knowledge import KnowledgeTargets
        from kjax.tokens.factory import open_tokenizer
        return {"knowledge": KnowledgeTargets(config, open_tokenizer(config))}


MODE = Multihot()
