"""`shared_position`: SHAKE's variant 5 (METHODS §1.5) — one token per
position, but a postposition's tokens take the position id of the last token
of the substantive it attaches to (kjax/shake/variants.py), in pretraining,
analysis and fine-tuning alike."""
from __future__ import annotations

import numpy as np

from kjax.inputs.base import InputMode
from kjax.shake.variants import shared_position_ids


class SharedPosition(InputMode):
    name = "shared_position"
    schemes = ("morph-sp", "multihot")
    why_schemes = "the shared positions come from POS pairs; plain sentencepiece has no tags"
    # transformers' tokenizers cannot compute these position ids: an exported
    # model would silently run with plain positions.
    export_format = None

    def position_ids(self, positions: dict, config, seq_len: int | None = None):
        return shared_position_ids(positions, seq_len or config.data.max_seq_len, config.shake)

    def finetune_position_ids(self, units: dict, lengths, seq_len: int, config):
        """Per row, the shared ids of its tokens ([CLS] A [SEP] B [SEP] units)."""
        out = np.tile(np.arange(seq_len, dtype=np.int32), (len(lengths), 1))
        for row, n in enumerate(lengths):
            encoded = {"input_ids": np.zeros(int(n), np.int32),
                       **{k: units[k][row, :int(n)] for k in ("word_ids", "morph_ids", "tags")}}
            out[row] = shared_position_ids(encoded, seq_len, config.shake)
        return out


MODE = SharedPosition()
