"""Config checks that need nothing but the config: each key's type and
allowed values (from the schema), then each section's consistency. They run
when a config is loaded, before anything is compiled. Checks that ask the
architecture, input-mode and objective registries (what an architecture
cannot run, which scheme a mode needs, which MLM losses it allows, ...) run
in `kjax.objectives.check_config`; checks against the devices in
`kjax.parallel.mesh.check_mesh`.
"""
from __future__ import annotations

import math
import re

from kjax.config.batch_ramp import check_ramp
from kjax.config.mask_schedule import highest_rate, scheduled
from kjax.config.schema import MESH_AXES, SCHEMA
from kjax.config.sources import check_sources
from kjax.config.tiles import parse_tiles
from kjax.errors import KjaxError

def _parses(tiles: str) -> bool:
    """Whether a model.attention_tiles value is a tiling (kjax/config/tiles.py)."""
    try:
        parse_tiles(tiles)
    except ValueError:
        return False
    return True


def check_values(config, schema: dict = SCHEMA, prefix: str = "") -> None:
    """Every key present, of its type and among its allowed values."""
    for name, node in schema.items():
        full = prefix + name
        if name not in config:
            raise KjaxError(f"config key {full!r} is missing; build configs on "
                            f"kjax.config.defaults()")
        value = config[name]
        if isinstance(node, dict):
            check_values(value, node, full + ".")
        elif not node.fits(value):
            raise KjaxError(f"{full}={value!r} is a {type(value).__name__}; give a "
                            f"{node.allowed()}")
        elif isinstance(value, float) and not math.isfinite(value):
            raise KjaxError(f"{full}={value!r}: give a finite number ({node.allowed()})")
        elif node.choices and value not in node.choices:
            *rest, last = map(str, node.choices)
            raise KjaxError(f"{full}={value!r}; choose {', '.join(rest)} or {last} "
                            f"({node.meaning})")
        elif node.kind not in (tuple, dict) and not node.accepts(value):
            raise KjaxError(f"{full}={value!r} is not allowed; give a {node.allowed()} "
                            f"({node.meaning})")


def shaking_enabled(c) -> bool:
    """Whether the model applies Eq. 1 during pretraining (any bf ≠ 0)."""
    m = c.model
    return m.shake_factor != 0 or any(x != 0 for x in m.shake_factor_per_layer)


def knowledge_enabled(c) -> bool:
    """Whether any knowledge objective (METHODS §2.5) is on."""
    g = c.knowledge
    return bool(g.hypernym_weight or g.sense_weight or g.verb_weight)


def validate_model(c) -> None:
    m = c.model
    if m.hidden_size % m.num_heads:
        raise KjaxError(f"model.hidden_size={m.hidden_size} is not divisible by "
                        f"model.num_heads={m.num_heads}")
    per_layer = m.shake_factor_per_layer
    if per_layer and len(per_layer) != m.num_layers:
        raise KjaxError(f"model.shake_factor_per_layer has {len(per_layer)} values for "
                        f"{m.num_layers} layers; give one per layer or ()")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in per_layer):
        raise KjaxError(f"model.shake_factor_per_layer={tuple(per_layer)}: give numbers")
    if m.embedding_size not in (0, m.hidden_size):
        k = c.knowledge
        if k.hypernym_weight > 0 or k.sense_weight > 0 or k.verb_weight > 0:
            raise KjaxError(f"model.embedding_size={m.embedding_size} (≠ hidden_size): the "
                            f"knowledge heads read hidden_size-wide embeddings; set the "
                            f"knowledge weights to 0 or model.embedding_size=0")
    for signature, tiles in dict(m.attention_tiles).items():
        if tiles != "table" and not _parses(str(tiles)):
            raise KjaxError(f"model.attention_tiles[{signature!r}] = {tiles!r}: give 'table' or "
                            f"F/DQ/DKV, each outer,inner,warps,stages (e.g. "
                            f"'128,64,8,2/128,32,4,5/128,32,4,5')")
    if m.attention_impl == "dot_product" and m.attention_dropout_rate > 0:
        raise KjaxError("model.attention_impl='dot_product' has no attention dropout "
                        "(training would run the explicit path): set "
                        "model.attention_dropout_rate=0, or attention_impl='auto' or 'flash'")


def validate_shake(c) -> None:
    k = c.shake
    if k.variant == "pos" and c.tokenizer.scheme in ("sentencepiece", "imported"):
        raise KjaxError("shake.variant='pos' needs POS tags: set tokenizer.scheme='morph-sp' "
                        f"or 'multihot' ({c.tokenizer.scheme} has none)")
    if shaking_enabled(c) and k.variant == "none":
        raise KjaxError("model.shake_factor is non-zero but shake.variant='none' gives no B; "
                        "set shake.variant to 'pos' or 'random'")
    for tag, weight in dict(k.tag_weights).items():
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight < 0:
            raise KjaxError(f"shake.tag_weights[{tag!r}]={weight!r}: give a number >= 0")


def validate_data(c) -> None:
    d = c.data
    if d.max_seq_len > c.model.max_position_embeddings:
        raise KjaxError(f"data.max_seq_len={d.max_seq_len} exceeds "
                        f"model.max_position_embeddings={c.model.max_position_embeddings}")
    if c.tokenizer.scheme == "multihot" and d.mask_unit == "token":
        raise KjaxError("data.mask_unit='token' would split multi-hot morphemes; use "
                        "'morpheme' or 'eojeol' with tokenizer.scheme=multihot")
    check_sources(c)
    validate_mask_rates(c)


def validate_mask_rates(c) -> None:
    """A schedule needs dynamic masking, and the prediction slots must hold
    the highest rate drawn (training or held out) of the longest example."""
    d = c.data
    if scheduled(d) and d.masking == "static":
        raise KjaxError(f"data.mask_schedule={d.mask_schedule!r} needs data.masking='dynamic' "
                        f"(static masks were drawn once, at prepare, at one rate); set "
                        f"--config.data.masking=dynamic or data.mask_schedule='constant'")
    if scheduled(d) and c.train.packing:
        raise KjaxError(f"data.mask_schedule={d.mask_schedule!r} with train.packing=True: a "
                        f"packed row holds a varying number of examples, so the step a record "
                        f"lands in is not known when it is masked; set train.packing=False, or "
                        f"give each phase its own constant data.masked_lm_prob")
    if not scheduled(d) and not d.eval_masked_lm_prob:
        return   # one rate, as before: prepare's slots were sized for it
    maskable = d.max_seq_len - 3   # [CLS] A [SEP] B [SEP]
    need = int(round(highest_rate(d) * maskable))
    if d.max_predictions_per_seq < need:
        raise KjaxError(f"data.max_predictions_per_seq={d.max_predictions_per_seq} cannot hold "
                        f"the highest mask rate's predictions ({highest_rate(d):g} of "
                        f"{maskable} maskable tokens: {need}); set "
                        f"--config.data.max_predictions_per_seq={need} (and prepare the data "
                        f"again: it records the slots)")


PROFILE_STEPS = re.compile(r"\s*([0-9]+)\s*:\s*([0-9]+)\s*")


def profile_steps(value: str) -> tuple[int, int] | None:
    """train.profile_steps as (START, COUNT), or None when it is "" (no trace)."""
    if not value.strip():
        return None
    found = PROFILE_STEPS.fullmatch(value)
    if not found or int(found[1]) < 1 or int(found[2]) < 1:
        raise KjaxError(f"train.profile_steps={value!r}: give START:COUNT with START >= 1 and "
                        f"COUNT >= 1 (e.g. '100:5' traces steps 100..104), or '' for no trace")
    return int(found[1]), int(found[2])


def wsd_decay_steps(train_cfg) -> int:
    """Steps in wsd's decay: train.decay_steps, or (0) the last decay_fraction
    share of num_steps (the schedule, kjax/train/schedules.py, takes it from
    here; a decay branch's 0 is set to its steps: kjax/pretrain/branch.py)."""
    steps = train_cfg.get("decay_steps", 0)
    return int(steps) if steps else int(round(train_cfg.get("decay_fraction", 0.1)
                                              * train_cfg.num_steps))


def validate_train(c) -> None:
    r = c.train
    profile_steps(r.profile_steps)
    if r.warmup_steps > r.num_steps:
        raise KjaxError(f"train.warmup_steps={r.warmup_steps} exceeds "
                        f"train.num_steps={r.num_steps}")
    if r.schedule == "wsd":
        decay = wsd_decay_steps(r)
        if r.warmup_steps + decay > r.num_steps:
            given = f"train.decay_steps={r.decay_steps}" if r.decay_steps else \
                f"train.decay_fraction={r.decay_fraction} of train.num_steps={r.num_steps}"
            raise KjaxError(f"train.schedule='wsd': train.warmup_steps={r.warmup_steps} + "
                            f"{decay} decay steps ({given}) exceed num_steps={r.num_steps}; "
                            f"lower warmup_steps or the decay, or raise num_steps")
    if r.batch_size % r.microbatches:
        raise KjaxError(f"train.microbatches={r.microbatches} does not divide train.batch_size="
                        f"{r.batch_size}; give a divisor of the batch (each microbatch holds "
                        f"batch_size / microbatches examples)")
    check_ramp(c)


def validate_mesh(c) -> None:
    h = c.mesh
    if [h[a] for a in MESH_AXES].count(-1) > 1:
        raise KjaxError("only one mesh axis may be -1 (fill); set the others explicitly")
    for rule in h.rules:
        ok = isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)
        axes = rule[1] if ok else None
        axes = (axes,) if isinstance(axes, str) else (() if axes is None else axes)
        if not ok or not isinstance(axes, (tuple, list)) or set(axes) - set(MESH_AXES):
            raise KjaxError(f"mesh.rules: {rule!r} is not (logical axis, mesh axes); mesh axes "
                            f"are {', '.join(MESH_AXES)} (a name, a tuple of names, or None)")
    batch = [tuple(r[1]) if isinstance(r[1], (tuple, list)) else r[1] for r in h.rules
             if r[0] == "batch"]
    if batch != [("data", "fsdp")]:
        raise KjaxError(f"mesh.rules must map 'batch' to ('data', 'fsdp') once (each process "
                        f"feeds whole data×fsdp shards), not {batch or 'nothing'}")


def validate_finetune(c) -> None:
    """The finetune section on its own (against the model and a task: in
    kjax.finetune when the verb runs)."""
    f = c.finetune
    if len(f.split) not in (2, 3) or min(f.split) <= 0 or not math.isclose(sum(f.split), 1.0):
        raise KjaxError(f"finetune.split={tuple(f.split)}: give 2 (train, dev) or 3 "
                        f"(train, dev, test) positive fractions summing to 1")
    for key in ("sweep_train", "sweep_infer"):
        values = f.shake[key]
        if not values or len(set(values)) != len(values) or not all(
                isinstance(v, (int, float)) for v in values):
            raise KjaxError(f"finetune.shake.{key}={values!r}: give distinct numbers, e.g. "
                            f"--config.finetune.shake.{key}='(-0.3,0.3)'")


SECTIONS = (validate_model, validate_shake, validate_data, validate_train, validate_mesh,
            validate_finetune)


def validate(config) -> None:
    """Types and allowed values of every key, then each section's checks."""
    check_values(config)
    for check in SECTIONS:
        check(config)
