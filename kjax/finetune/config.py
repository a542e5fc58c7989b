"""The `finetune` config section: its keys, defaults and checks.

The model, tokenizer and mesh come from the pretraining config (`--config`);
fine-tuning settings live in their own section, set three ways (later wins):
the defaults below, a `get_finetune_config()` function in the `--config` file
(see docs/FINETUNE.md), and `--config.finetune.KEY=VALUE` flags.
"""
from __future__ import annotations

import math

from kjax.config import ConfigDict, apply_override, load_module
from kjax.errors import KjaxError

SHAKE_VARIANTS = ("pos", "random")


def finetune_defaults() -> ConfigDict:
    f = ConfigDict()
    f.max_seq_len = 128
    f.batch_size = 32               # global; a multiple of the mesh's batch shards
    f.eval_batch_size = 0           # 0: batch_size
    f.epochs = 3
    f.learning_rate = 5e-5
    f.warmup_ratio = 0.1            # of all steps, then linear decay to 0 (BERT)
    f.weight_decay = 0.01
    f.grad_clip_norm = 1.0
    f.b1 = 0.9
    f.b2 = 0.999
    f.eps = 1e-6
    f.classifier_dropout = -1.0     # < 0: model.dropout_rate
    f.eval_every = 0                # steps between dev evaluations; 0 = once per epoch
    f.patience = 2                  # evaluations without dev gain before stopping; 0 = never
    f.select_metric = ""            # dev metric for early stopping; "" = the task's primary
    f.split = (0.8, 0.1, 0.1)       # only --train given: seeded train/dev[/test] fractions
    f.split_seed = 12345            # the split stays fixed while --seeds vary
    f.seed = 0                      # init of the head, dropout, data order (--seeds overrides)
    f.max_examples = 0              # > 0: keep the first N of each split (quick runs)
    f.checkpoint_every = 0          # steps; 0 = at every evaluation
    f.keep_checkpoints = 1
    f.log_every = 10
    f.sts_threshold = 3.0           # regress: the binary F1's threshold (KLUE-STS)
    f.shake = s = ConfigDict()      # METHODS §1.2-1.4
    s.variant = "pos"               # pos (postposition/adnominal pairs) | random
    s.bf_train = 0.0                # boost factor while fine-tuning (0 = off)
    s.bf_infer = 0.0                # boost factor at dev/test inference (0 = off)
    s.boost_prem = 1.0              # pos: weight of group 1 (JKS, JKO, JX)
    s.p = 0.1                       # random: share of tokens selected (thesis: 10 %)
    s.seed = 0                      # random variant's draws at inference
    s.sweep_train = (-0.3, 0.3)     # --sweep: bf_train values ×
    s.sweep_infer = (0.0, 0.3)      #          bf_infer values
    return f


def leaf_keys(c: ConfigDict, prefix: str = "") -> list[str]:
    keys = []
    for k, v in c.items():
        keys += leaf_keys(v, f"{prefix}{k}.") if isinstance(v, ConfigDict) else [prefix + k]
    return keys


def _merge(base: ConfigDict, update, where: str, prefix: str = "") -> None:
    for key, value in dict(update).items():
        if key not in base:
            raise KjaxError(f"{where}: finetune key {prefix}{key!r} does not exist; valid: "
                            f"{', '.join(sorted(base.keys()))}")
        if isinstance(base[key], ConfigDict):
            _merge(base[key], value, where, f"{prefix}{key}.")
        else:
            base[key] = value


def load_finetune_config(config_path: str | None, assignments: list[str]) -> ConfigDict:
    """Defaults ← the file's get_finetune_config() ← `finetune.a.b=value` strings."""
    section = finetune_defaults()
    if config_path:
        module = load_module(config_path, "kjax_finetune_config")
        if hasattr(module, "get_finetune_config"):
            _merge(section, module.get_finetune_config(), f"{config_path} get_finetune_config()")
    root = ConfigDict({"finetune": section})
    for assignment in assignments:
        apply_override(root, assignment)
    return root.finetune


def validate_finetune(f: ConfigDict, config, task: str) -> None:
    m = config.model
    if not 8 <= f.max_seq_len <= m.max_position_embeddings:
        raise KjaxError(f"finetune.max_seq_len={f.max_seq_len} must be in 8.."
                        f"{m.max_position_embeddings} (model.max_position_embeddings)")
    for key in ("batch_size", "epochs", "log_every", "keep_checkpoints"):
        if f[key] <= 0:
            raise KjaxError(f"finetune.{key}={f[key]} must be positive")
    if f.eval_batch_size < 0 or f.eval_every < 0 or f.patience < 0 or f.checkpoint_every < 0:
        raise KjaxError("finetune.eval_batch_size, eval_every, patience and checkpoint_every "
                        "must be >= 0")
    if not (f.learning_rate > 0 and 0 <= f.warmup_ratio < 1):
        raise KjaxError(f"finetune.learning_rate={f.learning_rate} must be > 0 and "
                        f"finetune.warmup_ratio={f.warmup_ratio} in [0, 1)")
    if len(f.split) not in (2, 3) or min(f.split) <= 0 or not math.isclose(sum(f.split), 1.0):
        raise KjaxError(f"finetune.split={tuple(f.split)}: give 2 (train, dev) or 3 "
                        f"(train, dev, test) positive fractions summing to 1")
    if f.shake.variant not in SHAKE_VARIANTS:
        raise KjaxError(f"finetune.shake.variant={f.shake.variant!r}; choose pos or random")
    for key in ("sweep_train", "sweep_infer"):
        values = f.shake[key]
        if not isinstance(values, (tuple, list)) or not values or len(set(values)) != len(values):
            raise KjaxError(f"finetune.shake.{key}={values!r}: give distinct numbers, e.g. "
                            f"--config.finetune.shake.{key}='(-0.3,0.3)'")
    if not 0 < f.shake.p <= 1:
        raise KjaxError(f"finetune.shake.p={f.shake.p} must be in (0, 1]")
    if f.select_metric and task and f.select_metric not in TASK_METRICS[task]:
        raise KjaxError(f"finetune.select_metric={f.select_metric!r} is not a {task} metric; "
                        f"choose one of {', '.join(TASK_METRICS[task])}")


TASK_METRICS = {
    "classify": ("accuracy", "macro_f1"), "pair": ("accuracy", "macro_f1"),
    "regress": ("pearson", "spearman", "f1", "mse"),
    "ner": ("entity_f1", "entity_macro_f1", "char_macro_f1"),
}
