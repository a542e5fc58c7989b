"""`merged`: SHAKE's variant 6 (METHODS §1.5) — a substantive and its
postposition as one position whose input is the sum of their token
embeddings (no E_inpos, no E_postag). Positions are found first
(kjax.shake.variants.merged_units), then whole positions are masked, so a
masked substantive never shows its postposition; masks stored by `prepare`
for another mode (one data folder serves all six SHAKE variants) are
extended to whole positions."""
from __future__ import annotations

from kjax.inputs.segments import SegmentMode
from kjax.shake.variants import merged_units


class Merged(SegmentMode):
    name = "merged"
    embedding = "segment_sum"
    schemes = ("morph-sp",)
    why_schemes = "substantive + postposition as one position needs the POS pairs of morph-sp"
    completes_stored_masks = True
    # The exported tokenizer cannot merge positions, and transformers' BERT
    # cannot sum them: refused rather than written as a plain BERT.
    export_format = None

    def units(self, example: dict) -> dict:
        return merged_units(example)


MODE = Merged()
