"""Knowledge targets per example, built in the loader (METHODS §2.5) by the
input modes whose positions are morphemes (kjax/inputs/multihot.py).

A position's form is its original tokens' surfaces joined (`@소 @크` → 소크),
its tag the morpheme's. Masked morphemes are excluded from the hypernym/sense
targets: those heads read the input vector, which carries nothing of a
[MASK]ed morpheme.
"""
from __future__ import annotations

import unicodedata

import numpy as np

from kjax.inputs.segments import position_of_tokens
from kjax.knowledge.resources import load_knowledge_base
from kjax.knowledge.targets import knowledge_targets
from kjax.morph.tags import TAGS
from kjax.tokens.multihot import token_surface
from kjax.tokens.sentencepiece import UNK


class KnowledgeTargets:
    def __init__(self, config, tokenizer):
        self.config, self.tokenizer = config, tokenizer
        self.kb = load_knowledge_base(config)

    def morphemes(self, original_ids: np.ndarray, example: dict) -> tuple[list, list]:
        position = position_of_tokens(np.asarray(example["morph_ids"]))
        forms = [""] * (int(position[-1]) + 1)
        tags = [""] * len(forms)
        for token, p, tag, morph in zip(original_ids, position, example["tags"],
                                        example["morph_ids"]):
            surface = self.tokenizer.id_to_token(int(token))
            forms[p] += surface if morph < 0 else token_surface(surface)
            tags[p] = "" if morph < 0 else TAGS[int(tag)]
        # Jamo-spelled syllables (@ᄀ @ᅡ @ᆷ, kjax/tokens/characters.py) compose back.
        return [unicodedata.normalize("NFC", f) for f in forms], tags

    def __call__(self, original_ids, example: dict, masked_positions, rng) -> dict:
        g, d = self.config.knowledge, self.config.data
        forms, tags = self.morphemes(original_ids, example)
        exclude = np.zeros(len(forms), bool)
        exclude[np.asarray(masked_positions, int)] = True
        return knowledge_targets(
            forms, tags, self.kb, self.tokenizer.token_to_id, rng, d.max_seq_len,
            g.max_hypernym, g.max_sense, g.max_hypernyms_per_noun, exclude=exclude, unk_id=UNK)
