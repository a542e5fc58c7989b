"""How much Eq. 1 (METHODS §1.2) moves the attention of a pretrained shaken
model: the mean attention weight α at B's POS pairs (postposition → its
substantive) over the held-out examples, with B applied at the model's own
bf and with B zeroed, every layer and head pooled.

    .venv/bin/python experiments/shake_attention_effect.py runs/shake_sanity/pos_plus \
        runs/shake_sanity/pos_minus

Each WORKDIR is a `kjax train` run of experiments/configs/shake_sanity.py (its
recorded config is read). docs/FINETUNE.md "Sanity table" quotes the output.
"""
from __future__ import annotations

import sys

import numpy as np

from kjax import objectives
from kjax.batches.loader import eval_batches
from kjax.checkpoint.restore import restore_params
from kjax.config import load_config
from kjax.inputs import input_mode
from kjax.train.state import make_model


def attention_at_pairs(workdir: str) -> tuple[np.ndarray, np.ndarray, float]:
    """(α at B's pairs with B, the same without B, the model's bf)."""
    config = load_config(f"{workdir}/kjax_config.py")
    if config.shake.variant != "pos":
        raise SystemExit(f"{workdir}: shake.variant is {config.shake.variant!r}, not 'pos'")
    params, _ = restore_params(config, workdir)
    model = make_model(config, True, return_analysis=True)
    on, off = [], []
    for batch in eval_batches(config, config.train.batch_size, 0):
        b = batch["shake"]
        kwargs = {**input_mode(config.model.input_mode).model_inputs(batch),
                  **objectives.model_inputs(batch)}
        for matrix, out in ((b, on), (np.zeros_like(b), off)):
            kwargs["shake"] = matrix
            alpha = np.asarray(model.apply({"params": params}, **kwargs)["analysis"]["alpha"])
            # α [layers, batch, heads, q, k]; B [batch, q, k] (the same for every head)
            out.append(alpha[np.broadcast_to(b[None, :, None] > 0, alpha.shape)])
    return np.concatenate(on), np.concatenate(off), config.model.shake_factor


def main(workdirs: list[str]) -> None:
    print("| run | bf | mean α at B's pairs, B zeroed | with B | ratio | mean abs. change |")
    print("|---|---|---|---|---|---|")
    for workdir in workdirs:
        on, off, bf = attention_at_pairs(workdir)
        print(f"| {workdir} | {bf:+g} | {off.mean():.5f} | {on.mean():.5f} | "
              f"{on.mean() / off.mean():.3f} | {np.abs(on - off).mean():.2e} |")


if __name__ == "__main__":
    main(sys.argv[1:])
