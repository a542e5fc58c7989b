"""One fine-tuning run (a seed × a fine-tune bf), evaluated with one or more
inference bf (METHODS §1.4: set independently).

- The state is pretraining's pytree {step, params, opt_state, rng}, sharded by
  the same logical rules (batch over data×fsdp, params over fsdp/tensor), and
  saved with the same orbax Checkpointer: a killed run resumes bit-exactly
  (dropout is fold_in(rng, step); the data order is a function of (seed,
  epoch); random-variant B of (seed, epoch, row)).
- Dev is evaluated every `eval_every` steps (default: each epoch) under every
  inference bf; each bf keeps its own best params (in the checkpoint), and
  training stops once `patience` evaluations in a row improved none of them.
- At the end each inference bf's best params predict dev and test.
- Where a call can reach the flash kernel (a GPU), the tiles of every flash
  call the train and eval steps make are chosen once, before any step is
  built (`fix_flash_tiles`, as `kjax train` chooses its own), and held in the
  tuner's config: every step compiles with its tiles fixed.
"""
from __future__ import annotations

import dataclasses
import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from ml_collections import FrozenConfigDict

from kjax.config import ConfigDict
from kjax.config.load import copy_of
from kjax.finetune.features import Features, make_batch
from kjax.finetune.heads import make_task_model, model_inputs
from kjax.finetune.pretrained import restore_pretrained_params
from kjax.finetune.registry import finetune_task
from kjax.finetune.readers import Example
from kjax.model.attention_core import tiles_for_steps
from kjax.parallel.mesh import (batch_sharding, logical_rules, logical_sharding, on_mesh,
                                put_batch, replicated)
from kjax.train.state import make_optimizer

TRAIN_SALT, EVAL_SALT = 0, 1   # keep training and inference draws of B apart


def learning_rate_for(hidden_size: int) -> float:
    """finetune.learning_rate=0: a peak rate by model size. BERT's 2e-5–5e-5
    suits base models; smaller encoders need more (the BERT miniatures' best
    lie at 1e-4 and up); the CPU demo (128 hidden, 300 pretraining steps)
    stayed at the majority class at 5e-5 and beat it at 5e-4 (docs/FINETUNE.md)."""
    return 5e-4 if hidden_size <= 128 else 1e-4 if hidden_size <= 512 else 5e-5


def bf_key(bf: float) -> str:
    return f"{float(bf):+g}"


@dataclasses.dataclass
class TaskData:
    task: str                              # a registered task's name
    label_names: list[str]
    examples: dict[str, list[Example]]     # train, dev[, test]
    features: dict[str, Features]

    def gold(self, split: str) -> list:
        return finetune_task(self.task).gold(self.examples[split])


class FineTuner:
    """Mesh, optimizer, pretrained weights and compiled steps, shared by every
    run of an experiment (seeds × fine-tune bf)."""

    def __init__(self, config, ft, data: TaskData, mesh, init: str | None, shake_cfg,
                 mode=None):
        self.config, self.ft, self.data, self.mesh = config, ft, data, mesh
        self.mode = mode   # the input mode (kjax/inputs): model inputs, positions
        self.task, self.shake_cfg = data.task, shake_cfg
        self.spec = finetune_task(data.task)   # the registered task: head, loss, metrics
        self.batch = ft.batch_size
        self.eval_batch = ft.eval_batch_size or ft.batch_size
        # choice: rows of one example stay together; batches count examples
        self.group = data.features["train"].group_size
        self.steps_per_epoch = math.ceil(len(data.features["train"]) // self.group / self.batch)
        self.total_steps = ft.epochs * self.steps_per_epoch
        self.eval_every = ft.eval_every or self.steps_per_epoch
        self.learning_rate = ft.learning_rate or learning_rate_for(config.model.hidden_size)
        opt = dict(learning_rate=self.learning_rate, num_steps=self.total_steps,
                   warmup_steps=int(round(ft.warmup_ratio * self.total_steps)),
                   weight_decay=ft.weight_decay, grad_clip_norm=ft.grad_clip_norm,
                   b1=ft.b1, b2=ft.b2, eps=ft.eps)
        self.tx = make_optimizer(ConfigDict(opt))
        self.dropout = ft.classifier_dropout if ft.classifier_dropout >= 0 else \
            config.model.dropout_rate
        self.num_labels = max(len(data.label_names), 1)
        self.metric = ft.select_metric or self.spec.primary
        self.init = init
        self._models, self._train_steps, self._eval_steps = {}, {}, {}
        self._pretrained = None
        self.flash_tiles = {}            # {signature: tiles} of the steps' flash calls
        self.pos_tokens_aligned = None   # set by make_tuner when POS comes from Kiwi
        self.target_scale = 1.0          # regress: targets are label / scale (make_tuner)
        self.shardings = self._state_shardings()

    # --- models, state, compiled steps ------------------------------------------------
    def model(self, bf: float, deterministic: bool):
        key = (float(bf), deterministic)
        if key not in self._models:
            self._models[key] = make_task_model(self.config, self.task, self.num_labels, bf,
                                                deterministic, self.dropout)
        return self._models[key]

    def _dummy(self) -> dict:
        """Init inputs: one training row as the input mode feeds it (no B)."""
        batch = make_batch(self.data.features["train"], np.zeros(1, np.int64))
        return model_inputs(batch, self.mode)

    def _boxed_state(self, rng):
        params = self.model(0.0, True).init(rng, **self._dummy())["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": self.tx.init(params), "rng": jax.random.key_data(rng)}

    def _state_shardings(self):
        abstract = jax.eval_shape(self._boxed_state, jax.random.key(0))
        rules = logical_rules(self.config)
        with nn.logical_axis_rules(rules):
            return logical_sharding(self.mesh, nn.get_partition_spec(abstract), rules)

    def _context(self):
        return on_mesh(self.mesh, self.config)

    def pretrained_bert(self):
        """The encoder subtree of the --init checkpoint, restored once."""
        if self._pretrained is None and self.init:
            template = jax.eval_shape(lambda r: nn.meta.unbox(self._boxed_state(r)),
                                      jax.random.key(0))["params"]["bert"]
            self._pretrained = restore_pretrained_params(self.config, self.mesh, self.init,
                                                         template, self.ft.init_weights)
        return self._pretrained

    def init_state(self, seed: int):
        def init(rng, bert):
            params_rng, dropout_rng = jax.random.split(rng)
            params = nn.meta.unbox(self.model(0.0, True).init(params_rng, **self._dummy())["params"])
            if bert is not None:
                params = {**params, "bert": bert}
            return {"step": jnp.zeros((), jnp.int32), "params": params,
                    "opt_state": self.tx.init(params), "rng": jax.random.key_data(dropout_rng)}
        with self._context():
            return jax.jit(init, out_shardings=self.shardings)(jax.random.key(seed),
                                                               self.pretrained_bert())

    def abstract_state(self):
        shapes = jax.eval_shape(lambda r: nn.meta.unbox(self._boxed_state(r)), jax.random.key(0))
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            shapes, self.shardings)

    def copy_params(self, params):
        """A copy in fresh buffers (the train step donates the state's)."""
        if "copy" not in self._eval_steps:
            self._eval_steps["copy"] = jax.jit(lambda p: jax.tree.map(jnp.copy, p),
                                               out_shardings=self.shardings["params"])
        return self._eval_steps["copy"](params)

    def train_step(self, bf: float):
        if bf not in self._train_steps:
            model, tx, task, mode = self.model(bf, False), self.tx, self.spec, self.mode
            group = self.group

            def step(state, batch):
                rng = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])

                def loss_fn(params):
                    out = model.apply({"params": params}, **model_inputs(batch, mode),
                                      rngs={"dropout": rng})
                    return task.loss(out, batch, group)

                loss, grads = jax.value_and_grad(loss_fn)(state["params"])
                updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
                new = {**state, "step": state["step"] + 1, "opt_state": opt_state,
                       "params": optax.apply_updates(state["params"], updates)}
                return new, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

            self._train_steps[bf] = jax.jit(
                step, in_shardings=(self.shardings, batch_sharding(self.mesh)),
                out_shardings=(self.shardings, replicated(self.mesh)), donate_argnums=(0,))
        return self._train_steps[bf]

    def eval_step(self, bf: float):
        if bf not in self._eval_steps:
            model, task, mode, group = self.model(bf, True), self.spec, self.mode, self.group

            def step(params, batch):
                out = model.apply({"params": params}, **model_inputs(batch, mode))
                return task.predictions(out, group)

            self._eval_steps[bf] = jax.jit(
                step, in_shardings=(self.shardings["params"], batch_sharding(self.mesh)),
                out_shardings=replicated(self.mesh))
        return self._eval_steps[bf]

    # --- the flash kernels' tiles -----------------------------------------------------
    def fix_flash_tiles(self, bf_trains, bf_infers) -> dict[str, str]:
        """Chooses the tiles of every flash call the train steps (each bf of
        `bf_trains`) and eval steps (`bf_infers`) make, before any step is
        built: the steps traced against abstract state and batches, the tiles
        chosen once the traces have closed (the config's, the card's cache,
        else a timing: kjax/model/attention_core.py), then held in this
        tuner's config (`model.attention_tiles`), from which every model and
        step is built afresh. Returns them; {} where no call can reach the
        kernel (CPU, TPU, xla, dot_product), where nothing is traced."""
        self.flash_tiles = tiles_for_steps(self.config.model,
                                           lambda: self._traced_steps(bf_trains, bf_infers))
        if self.flash_tiles:
            config = copy_of(self.config)   # (the loader's config is frozen)
            config.model.attention_tiles.update(self.flash_tiles)
            self.config = FrozenConfigDict(config)
            self._models, self._train_steps, self._eval_steps = {}, {}, {}
        return self.flash_tiles

    def _traced_steps(self, bf_trains, bf_infers) -> list:
        """The jaxprs of the train step per fine-tune bf and of the eval step per
        inference bf and eval batch shape (dev, test), nothing compiled or run."""
        state = self.abstract_state()
        with self._context():
            traced = [self.train_step(bf).trace(
                state, self._abstract(self.train_batch(self.ft.seed, 1, bf))).jaxpr
                for bf in dict.fromkeys(bf_trains)]
            for bf in dict.fromkeys(bf_infers):
                batches = [self._abstract(self.predict_batch(split, 0, bf)[0])
                           for split in ("dev", "test") if split in self.data.features]
                for batch in {repr(b): b for b in batches}.values():
                    traced.append(self.eval_step(bf).trace(state["params"], batch).jaxpr)
        return traced

    def _abstract(self, batch: dict) -> dict:
        """A host-local batch's global shapes and shardings, as the step sees it."""
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                            put_batch(batch, self.mesh))

    # --- batches and predictions ------------------------------------------------------
    def _local(self, rows: np.ndarray, size: int) -> np.ndarray:
        """This process's slice of a global batch of `size` rows (-1 = padding)."""
        rows = np.concatenate([rows, np.full(size - len(rows), -1)])
        per = size // jax.process_count()
        return rows[jax.process_index() * per:(jax.process_index() + 1) * per]

    def _rows(self, units: np.ndarray) -> np.ndarray:
        """Examples → their rows (choice: `group` rows each; -1 stays padding)."""
        if self.group == 1:
            return units
        rows = units[:, None] * self.group + np.arange(self.group)
        return np.where(units[:, None] >= 0, rows, -1).ravel()

    def train_batch(self, seed: int, step: int, bf: float) -> dict:
        epoch, k = divmod(step - 1, self.steps_per_epoch)
        order = np.random.default_rng([seed, epoch]).permutation(
            len(self.data.features["train"]) // self.group)
        rows = self._rows(self._local(order[k * self.batch:(k + 1) * self.batch], self.batch))
        shake = self.shake_cfg if bf != 0 else None
        return make_batch(self.data.features["train"], rows, shake, (seed, TRAIN_SALT, epoch))

    def predict_batch(self, split: str, start: int, bf: float) -> tuple[dict, int]:
        """(this process's slice of the eval batch of `split` from example
        `start`, the number of real examples in it)."""
        feats = self.data.features[split]
        shake = self.shake_cfg if bf != 0 else None
        rows = np.arange(start, min(start + self.eval_batch, len(feats) // self.group))
        batch = make_batch(feats, self._rows(self._local(rows, self.eval_batch)), shake,
                           (self.shake_cfg.seed, EVAL_SALT))
        return batch, len(rows)

    def predict(self, params, split: str, bf: float) -> list:
        feats = self.data.features[split]
        step, out = self.eval_step(bf), []
        for start in range(0, len(feats) // self.group, self.eval_batch):
            batch, real = self.predict_batch(split, start, bf)
            with self._context():
                preds = jax.device_get(step(params, put_batch(batch, self.mesh)))
            out += list(preds[:real])
        return self.spec.decode(self, split, feats, out)

    def _decode(self, feats: Features, i: int, pred):
        """One row's prediction as the task reports it (a class name, a score, tags)."""
        return self.spec.decode_row(self, feats, i, pred)

    def evaluate(self, params, split: str, bf: float) -> tuple[dict, list]:
        preds = self.predict(params, split, bf)
        return self.spec.metrics(self.data.gold(split), preds, self.data.label_names,
                                 self.ft.sts_threshold), preds

    def selection_value(self, metrics: dict) -> float:
        v = metrics.get(self.metric)
        if v is None:
            return -math.inf
        return -v if self.metric == "mse" else v

    def baseline(self, split: str) -> dict:
        train_gold = self.data.gold("train")
        preds = self.spec.baseline(train_gold, self.data.gold(split))
        return self.spec.metrics(self.data.gold(split), preds, self.data.label_names,
                                 self.ft.sts_threshold)


def write_json(path: str, obj) -> None:
    """A JSON file, local or a URL (kjax/paths.py)."""
    from kjax import paths
    paths.write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, default=float))
