"""`bert`: the BERT recipe (kjax/model/encoder.py): post-LN, GELU, learned
positions, token types, biases, the pooler and NSP head; its layers one
scanned loop when model.scan_layers."""
from __future__ import annotations

from kjax.model.arch.base import Architecture, encoder_flops, mlm_head_flops
from kjax.model.encoder import BertForPreTraining


class Bert(Architecture):
    name = "bert"
    title = "BERT"
    model = BertForPreTraining
    has_nsp_head = True

    def flops_per_example(self, model_cfg, seq_len: int, predictions: int) -> float:
        h, v = model_cfg.hidden_size, model_cfg.vocab_size
        encoder = encoder_flops(h, model_cfg.intermediate_size, model_cfg.num_layers, seq_len)
        heads = mlm_head_flops(h, h, v, predictions) + 2 * (h * h + 2 * h)   # MLM, pooler+NSP
        return 3.0 * (encoder + heads)


ARCH = Bert()
