"""The parameters of a training run's checkpoint, on the host, for the tools
that need only them (`kjax export`, `kjax analyze`): no optimizer state on
device, no data."""
from __future__ import annotations

import os

import numpy as np

from kjax.errors import KjaxError


def restore_params(config, workdir: str, step: int | None = None) -> tuple[dict, int]:
    """(params as numpy arrays, step) of WORKDIR/checkpoints (latest step by default)."""
    import jax
    from kjax.checkpoint.manager import Checkpointer
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import abstract_state, make_model, make_optimizer
    from kjax import paths
    directory = paths.join(workdir, "checkpoints")
    if not paths.isdir(directory):   # local or gs:// (kjax/paths.py)
        raise KjaxError(f"no checkpoints in {directory}; train first (`kjax train --workdir "
                        f"{workdir}`) or pass the --workdir that holds them")
    t = config.train
    checkpoints = Checkpointer(directory, t.checkpoint_every, t.keep_checkpoints, read_only=True)
    try:
        steps = checkpoints.all_steps()
        step = steps[-1] if step is None and steps else step
        if step is None or step not in steps:
            raise KjaxError(f"no checkpoint for step {step} in {directory}; available: {steps}")
        target, _ = abstract_state(config, make_mesh(config), make_model(config, True),
                                   make_optimizer(t))
        try:
            state, _ = checkpoints.restore(step, target)
        except KjaxError as e:   # almost always the wrong config, not a broken checkpoint
            saved = os.path.join(workdir, "kjax_config.py")
            hint = f" (`kjax import` wrote it to {saved})" if os.path.isfile(saved) else ""
            raise KjaxError(f"checkpoint {directory}/{step} does not fit this config: pass the "
                            f"--config and --config.* overrides the run was trained with{hint} "
                            f"(model sizes, model.input_mode, knowledge weights). Detail: "
                            f"{str(e).split('restored ', 1)[-1].split(';')[0][:160]}") from None
    finally:
        checkpoints.close()
    return jax.tree.map(np.asarray, jax.device_get(state["params"])), step
