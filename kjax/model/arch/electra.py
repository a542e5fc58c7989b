"""`electra`: ELECTRA (kjax/model/electra.py): a BERT-recipe discriminator
trained by replaced-token detection against a small generator that shares
its embeddings. Two scanned layer loops (the discriminator's and the
generator's); no NSP head; `kjax export` writes the pair of folders."""
from __future__ import annotations

from kjax.model.arch.base import Architecture, encoder_flops, mlm_head_flops
from kjax.model.config import EncoderConfig
from kjax.model.electra import ElectraForPreTraining, generator_config


class Electra(Architecture):
    name = "electra"
    title = "ELECTRA"
    model = ElectraForPreTraining
    has_rtd_head = True
    export_format = "electra_pair"
    fill_mask_head = "generator"

    def scanned_loops(self, model_cfg) -> tuple:
        if not model_cfg.scan_layers:
            return ()
        return (("model.num_layers", model_cfg.num_layers),
                ("model.generator_num_layers",
                 model_cfg.generator_num_layers or model_cfg.num_layers))

    def flops_per_example(self, model_cfg, seq_len: int, predictions: int) -> float:
        """The discriminator's layers, the generator's, the generator's MLM head
        at the masked rows (to E wide) and RTD's head at every token."""
        h, v = model_cfg.hidden_size, model_cfg.vocab_size
        gen = generator_config(EncoderConfig.from_config(model_cfg))
        g, e = gen.hidden_size, gen.embed_dim
        encoders = (encoder_flops(h, model_cfg.intermediate_size, model_cfg.num_layers, seq_len)
                    + encoder_flops(g, gen.intermediate_size, gen.num_layers, seq_len))
        heads = mlm_head_flops(g, e, v, predictions) + seq_len * 2 * (h * h + h)
        return 3.0 * (encoders + heads)


ARCH = Electra()
