"""Multiple choice (NIKL CoPA): one row per (premise, alternative) pair,
[CLS] premise [SEP] alternative [SEP]; the head scores each row
(tanh(pooler(h_[CLS])) → dense(1)) and a softmax runs over the rows of one
example. Rows of an example sit next to each other (`group_size` of them),
so batches take whole examples."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune.features import Encoder, Features
from kjax.finetune.tasks import Example


def encode_choices(encoder: Encoder, examples: Sequence[Example]) -> Features:
    """`encoder` encodes pairs with labels "0"/"1"; every example must have
    as many alternatives as the first."""
    k = len(examples[0].choices)
    rows = []
    for ex in examples:
        if len(ex.choices) != k:
            raise KjaxError(f"{ex.where}: {len(ex.choices)} alternatives, but the first "
                            f"example has {k}; --task choice needs the same number everywhere")
        rows += [Example(ex.guid, ex.text_a, c, str(int(j == ex.label)), where=ex.where)
                 for j, c in enumerate(ex.choices)]
    feats = encoder.encode(rows)
    feats.labels = np.repeat(np.asarray([ex.label for ex in examples], np.int32), k)
    feats.group_size = k
    return feats
