"""`--init`: the encoder weights of a kjax pretraining checkpoint.

Accepted: a pretraining workdir (holding checkpoints/), its checkpoints/
directory (the newest step that verifies; damaged newer steps are named and
skipped, never moved), or checkpoints/STEP (verified, or refused in one line). The full pretraining state is
restored onto the fine-tuning mesh (as `kjax eval` does: Session's abstract
state → Checkpointer.restore), and the task model's `bert` subtree is taken
from its params, or from their EMA with `finetune.init_weights=ema`
(`--weights ema`); the pretraining-only heads (MLM transform, NSP) are dropped.
"""
from __future__ import annotations

import jax

from kjax.checkpoint.manager import ConfigMismatch
from kjax.checkpoint.restore import (check_weights, chosen_weights, locate_checkpoint,
                                     restore_read_only)
from kjax.errors import KjaxError
from kjax.train.state import abstract_state, make_model, make_optimizer

NO_INIT = ("", "none", "random")


def resolve_checkpoint(path: str) -> tuple[str, int | None]:
    """(checkpoints directory, step or None for the newest that verifies) for an --init path."""
    return locate_checkpoint(path, "--init", "pass the pretraining --workdir, its checkpoints/ "
                             "directory or checkpoints/STEP (or --init none for random weights)")


def restore_pretrained_params(config, mesh, path: str, template,
                              weights: str = "params") -> dict:
    """The `bert` subtree for the task model: `template` holds its shapes; of
    the checkpoint's params or their EMA (`weights`: finetune.init_weights)."""
    check_weights(config, weights, path)
    directory, step = resolve_checkpoint(path)
    model = make_model(config, deterministic=True)
    target, _ = abstract_state(config, mesh, model, make_optimizer(config.train))
    try:  # an explicit checkpoints/STEP is verified or refused; else the newest that verifies
        state, _, step = restore_read_only(directory, target, step, what="--init STEP")
    except ConfigMismatch as e:
        raise KjaxError(f"--init {path} does not fit --config: {e}; pass the "
                        f"--config and --config.model.* overrides it was pretrained with") from None
    params = chosen_weights(state, weights)
    missing = sorted(set(template) - set(params))
    if missing:
        raise KjaxError(f"--init {directory}/{step}: the checkpoint lacks {', '.join(missing)}; "
                        f"it was not written by `kjax train` with this --config")
    picked = {k: params[k] for k in template}
    for (path_, want), got in zip(jax.tree_util.tree_leaves_with_path(template),
                                  jax.tree.leaves(picked)):
        if tuple(want.shape) != tuple(got.shape):
            raise KjaxError(f"--init {directory}/{step}: {jax.tree_util.keystr(path_)} has "
                            f"shape {tuple(got.shape)}, the model wants {tuple(want.shape)}; "
                            f"use the --config the checkpoint was pretrained with")
    return picked
