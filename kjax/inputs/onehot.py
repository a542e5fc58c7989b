"""`onehot`: BERT's input — one token per position, positions 0..s-1
(METHODS §4). The plain case every other mode departs from."""
from __future__ import annotations

from kjax.inputs.base import InputMode


class OneHot(InputMode):
    name = "onehot"
    packable = True


MODE = OneHot()
