"""`modern`: the ModernBERT recipe (kjax/model/modern.py): pre-LN, RoPE,
GeGLU, no biases, local/global attention, MLM alone. Its layers differ
(window, θ, layer 0's missing norm), so they are always unrolled: no scanned
loop, and model.scan_unroll does nothing (refused unless left at -1)."""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.model.arch.base import Architecture, mlm_head_flops
from kjax.model.modern import ModernBertForPreTraining


class Modern(Architecture):
    name = "modern"
    title = "ModernBERT"
    model = ModernBertForPreTraining
    use_bias = False                     # as its model builds itself (modern.py); heads on it too
    auto_keys = ("train.dropout_rng",)   # not model.scan_unroll: no scanned loop to unroll
    export_format = "modernbert"

    def check(self, config) -> None:
        m = config.model
        if m.scan_unroll != -1:
            raise KjaxError(f"model.scan_unroll={m.scan_unroll} does nothing with "
                            f"model.arch='{m.arch}' (its layers are unrolled, never scanned): "
                            f"leave it at -1 (a run kjax 0.1.0 recorded: set it to -1 in its "
                            f"kjax_config.py)")
        if m.embedding_size not in (0, m.hidden_size):
            raise KjaxError(f"model.embedding_size={m.embedding_size} (≠ hidden_size) needs "
                            f"model.arch='bert' or 'electra'; set model.embedding_size=0")

    def scanned_loops(self, model_cfg) -> tuple:
        return ()

    def flops_per_example(self, model_cfg, seq_len: int, predictions: int) -> float:
        """GeGLU: 3 matrices; a local layer's queries see w + 1 keys."""
        h, i, v, n = (model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.vocab_size,
                      model_cfg.num_layers)
        every, window = model_cfg.global_attn_every_n_layers, model_cfg.local_attention
        keys = [seq_len if not window or layer % every == 0 else min(seq_len, window + 1)
                for layer in range(n)]
        encoder = sum(seq_len * (2 * (4 * h * h + 3 * h * i) + 2 * 2 * seen * h)
                      for seen in keys)
        return 3.0 * (encoder + mlm_head_flops(h, h, v, predictions))


ARCH = Modern()
