"""What an architecture is (`model.arch`): everything that depends on which
encoder recipe a run trains, in one object (one module per architecture in
kjax/model/arch/, registered in kjax/model/arch/__init__.py). Consumers ask
the architecture; none of them compares `model.arch` with a name
(tests/test_architecture.py holds them to it).

    model                      the pretraining module it builds (`build`), and
    use_bias                   whether its projections and norms carry biases
    has_nsp_head               BERT's pooler + NSP head (objective `nsp`; fine-tuning
                               starts a fresh pooler where there is none)
    has_rtd_head               ELECTRA's discriminator head (objective `rtd`)
    check(config)              one-line errors for keys it cannot run with
                               (run by kjax.objectives.check_config)
    auto_keys                  the `auto` keys that act on it (kjax/config/platform_defaults.py
                               resolves those, and only those)
    scanned_loops(model_cfg)   its scanned layer loops as (config key, depth): what
                               `kjax compile` unrolls to count every layer
                               (kjax/pretrain/aot.py)
    flops_per_example(...)     training FLOPs of one example (MFU, `kjax compile`'s roofline)
    export_format              how `kjax export` writes it and `kjax import` reads it
                               back: a name kjax/export/formats.py maps to a writer
                               and a reader (None: refused, transformers cannot run it)
    fill_mask_head             whose MLM head `kjax fill-mask` asks ("": the model's own)

Lower layers never see the object: the config layer takes `auto_keys` as an
argument, and the layers above map the names it declares (`export_format`)
to their own code, as they do an input mode's `embedding` and `export_format`.
"""
from __future__ import annotations

import dataclasses

from kjax.config.platform_defaults import AUTO
from kjax.model.config import EncoderConfig


class Architecture:
    name = ""
    title = ""                           # as reports and messages name it: "BERT"
    model = None                         # the flax module class of its pretraining model
    use_bias = True                      # False: a bias-free recipe (every projection and norm)
    has_nsp_head = False
    has_rtd_head = False
    auto_keys: tuple = tuple(AUTO)       # every auto key acts unless an architecture says not
    export_format = "bert"               # kjax/export/formats.py; None: export refused
    fill_mask_head = ""                  # "": the model's own MLM head; else the submodule's

    # ---- the model -------------------------------------------------------------------
    def encoder_config(self, enc: EncoderConfig) -> EncoderConfig:
        """`enc` as this recipe builds it (its bias). Heads built on top of the
        model (fine-tuning's) take their layers from this config too."""
        return dataclasses.replace(enc, use_bias=self.use_bias)

    def build(self, enc: EncoderConfig, deterministic: bool = True,
              return_analysis: bool = False):
        """The pretraining model of this architecture for `enc`."""
        return self.model(self.encoder_config(enc), deterministic=deterministic,
                          return_analysis=return_analysis)

    # ---- the config ------------------------------------------------------------------
    def check(self, config) -> None:
        """One-line KjaxErrors for what this architecture cannot run."""

    # ---- what `kjax compile` and MFU count -------------------------------------------
    def scanned_loops(self, model_cfg) -> tuple[tuple[str, int], ...]:
        """(the config key of its depth, the depth) of each layer loop that
        model.scan_layers turns into one scanned loop; () when none is."""
        return (("model.num_layers", model_cfg.num_layers),) if model_cfg.scan_layers else ()

    def flops_per_example(self, model_cfg, seq_len: int, predictions: int) -> float:
        """Training FLOPs (forward + backward = 3× forward) of one example,
        counting *bidirectional* attention: every query sees all seq_len keys."""
        raise NotImplementedError


def encoder_flops(hidden: int, intermediate: int, layers: int, seq_len: int) -> float:
    """Forward FLOPs of `layers` post-LN layers (4 projections, a 2-matrix FFN;
    QKᵀ and αV over every key) on seq_len positions."""
    per_token_layer = 2 * (4 * hidden * hidden + 2 * hidden * intermediate) \
        + 2 * 2 * seq_len * hidden
    return layers * seq_len * per_token_layer


def mlm_head_flops(hidden: int, width: int, vocab: int, predictions: int) -> float:
    """Forward FLOPs of the MLM head at `predictions` rows: the transform
    (hidden → width) and the decoder (width → vocab)."""
    return predictions * 2 * (hidden * width + width * vocab)
