"""`kjax import`: a local transformers BERT / RoBERTa / ELECTRA-discriminator
folder → a kjax checkpoint (`W/checkpoints/0`, the layout `kjax train` and
`kjax eval` restore) + a kjax config file. Nothing is downloaded; weights
are read with safetensors, or `torch.load(weights_only=True)` for .bin files.

- BERT: every tensor maps one to one (kjax/export/hf_export.py's table).
- RoBERTa: positions start at padding_idx + 1 (RoBERTa numbers real tokens
  padding_idx+1, padding_idx+2, …). kjax numbers them 0, 1, …, so the table
  is sliced: kjax row i = RoBERTa row padding_idx + 1 + i, and
  max_position_embeddings shrinks by padding_idx + 1 (514 → 512). Exact for
  right-padded input; only the (masked) pad rows differ, as RoBERTa gives
  those position padding_idx.
- ELECTRA discriminator: the encoder only (its replaced-token head is not a
  kjax head); an embedding_size below hidden_size (KoELECTRA-small) becomes
  model.embedding_size, with `embeddings_project` after the embeddings' LayerNorm.
  With its generator it is one ELECTRA run instead: kjax/export/electra_pair_import.py.
- kjax multi-hot (model_type "kjax_multihot", written by `kjax export`): BERT
  plus E_inpos/E_postag; the config becomes input_mode='multihot', and a
  one-hot base config is switched to the multihot tokenizer scheme, the Eq. 9
  loss and morpheme masking, which a multi-hot model needs.

Heads the source lacks (pooler, MLM transform/bias, NSP, knowledge heads) get
exactly the values `kjax train` would start them from (`model.init` with
train.seed, kjax/train/state.py) and are listed in `W/import.json`.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.export import multihot_export as mx
from kjax.export import narrow_embedding_export as ne
from kjax.inputs import MODES, input_mode
from kjax.export.hf_export import (BERT_HEADS, BERT_MLM_BIAS, EMBEDDINGS, LAYER, POOLER,
                                   _set, module_from_torch, stack_layers)
from kjax.model.config import EncoderConfig

ROBERTA_HEADS = (("lm_head.dense", ("mlm_transform",), "dense"),
                 ("lm_head.layer_norm", ("mlm_layer_norm",), "ln"))
# What grain's iterator over kjax's train dataset reports before its first batch.
FRESH_LOADER_STATE = {"next_index": 0}
# transformers' model_type → where its tensors live (prefix) and its MLM head's names.
MODEL_TYPES = {
    "bert": {"prefix": "bert", "heads": BERT_HEADS, "mlm_bias": BERT_MLM_BIAS},
    "roberta": {"prefix": "roberta", "heads": ROBERTA_HEADS, "mlm_bias": "lm_head.bias"},
    "electra": {"prefix": "electra", "heads": (), "mlm_bias": None},
    mx.MODEL_TYPE: {"prefix": "bert", "heads": BERT_HEADS, "mlm_bias": BERT_MLM_BIAS},
}


def read_hf_config(hf_dir: str) -> dict:
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise KjaxError(f"{path} not found; --hf must be a local transformers model folder "
                        f"(config.json + model.safetensors), e.g. one saved with save_pretrained")
    with open(path, encoding="utf-8") as f:
        hf = json.load(f)
    kind = hf.get("model_type")
    if kind not in MODEL_TYPES:
        raise KjaxError(f"{path}: model_type={kind!r}; kjax imports {', '.join(MODEL_TYPES)}")
    checks = {"hidden_act": (hf.get("hidden_act", "gelu"), "gelu"),
              "position_embedding_type": (hf.get("position_embedding_type", "absolute"),
                                          "absolute"),
              "is_decoder": (hf.get("is_decoder", False), False)}
    for key, (have, want) in checks.items():
        if have != want:
            raise KjaxError(f"{path}: {key}={have!r}, but a kjax encoder needs {want!r} "
                            f"(exact erf GELU, learned absolute positions, an encoder); "
                            f"this model cannot be imported exactly")
    return hf


def read_hf_weights(hf_dir: str) -> dict[str, np.ndarray]:
    """All tensors of the folder as float32 numpy arrays (safe loaders only)."""
    import torch
    files = sorted(glob.glob(os.path.join(hf_dir, "*.safetensors")))
    tensors: dict[str, np.ndarray] = {}
    if files:
        from safetensors.torch import load_file
        for file in files:
            tensors.update({k: v.float().numpy() for k, v in load_file(file).items()})
        return tensors
    files = sorted(glob.glob(os.path.join(hf_dir, "pytorch_model*.bin")))
    if not files:
        raise KjaxError(f"{hf_dir} holds no model.safetensors or pytorch_model.bin; save the "
                        f"model with save_pretrained first")
    for file in files:
        try:
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:  # pickle with code in it: refuse, never execute
            raise KjaxError(f"{file} cannot be loaded safely ({type(e).__name__}); convert it "
                            f"to safetensors with transformers first") from None
        tensors.update({k: v.float().numpy() for k, v in state.items()})
    return tensors


def encoder_config(hf: dict, scan_layers: bool) -> EncoderConfig:
    offset = position_offset(hf)
    return EncoderConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        embedding_size=(0 if hf.get("embedding_size", hf["hidden_size"]) == hf["hidden_size"]
                        else hf["embedding_size"]),    # ELECTRA-small: E < H, projected
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"] - offset,
        type_vocab_size=hf.get("type_vocab_size", 2),
        dropout_rate=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        initializer_range=hf.get("initializer_range", 0.02),
        dtype="float32", scan_layers=scan_layers,
        input_mode=imported_input_mode(hf),
        **(dict(num_pos_tags=hf["num_pos_tags"],
                max_tokens_per_morpheme=hf["max_tokens_per_morpheme"])
           if hf["model_type"] == mx.MODEL_TYPE else {}))


def imported_input_mode(hf: dict) -> str:
    """The input mode a folder was exported from (config.json's kjax_input_mode;
    before it was recorded: multihot for kjax_multihot, else onehot)."""
    name = hf.get("kjax_input_mode") or ("multihot" if hf["model_type"] == mx.MODEL_TYPE
                                         else "onehot")
    if name not in MODES:
        raise KjaxError(f"{hf.get('_dir', '--hf')}/config.json: kjax_input_mode={name!r} is not an input "
                        f"mode of this kjax ({', '.join(MODES)})")
    return name


def position_offset(hf: dict) -> int:
    """RoBERTa's first real position is padding_idx + 1; BERT/ELECTRA start at 0."""
    return hf.get("pad_token_id", 1) + 1 if hf["model_type"] == "roberta" else 0


def hf_to_params(tensors: dict[str, np.ndarray], hf: dict, enc: EncoderConfig
                 ) -> tuple[dict, list[str], list[str]]:
    """(params found, kjax modules the source lacks, source tensors not used)."""
    layout = MODEL_TYPES[hf["model_type"]]
    prefix = layout["prefix"]
    # LayerNorm gamma/beta: the names of checkpoints converted from TensorFlow.
    tensors = {k.replace("LayerNorm.gamma", "LayerNorm.weight")
                .replace("LayerNorm.beta", "LayerNorm.bias"): v for k, v in tensors.items()}
    if not any(k.startswith(prefix + ".") for k in tensors):
        tensors = {f"{prefix}.{k}" if k.startswith(("embeddings.", "encoder.", "pooler."))
                   else k: v for k, v in tensors.items()}   # saved from the bare model
    if any(k.startswith("generator_predictions.") for k in tensors):
        layout = {**layout, "heads": ne.HEADS, "mlm_bias": ne.MLM_BIAS}
    used: set[str] = set()

    def take(name: str, kind: str, required: bool = True):
        keys = ("weight",) if kind == "embed" else ("weight", "bias")
        found = {key: tensors.get(f"{name}.{key}") for key in keys}
        if any(v is None for v in found.values()):
            if required:
                raise KjaxError(f"{hf['_dir']}: tensor {name}.{keys[0]} is missing; is this a "
                                f"{hf['model_type']} checkpoint saved by transformers?")
            return None
        used.update(f"{name}.{key}" for key in keys)
        return module_from_torch(found, kind, enc)

    params: dict = {}
    extra = mx.MULTIHOT_EMBEDDINGS if mx.is_multihot(enc) else ()
    for name, path, kind in EMBEDDINGS + extra:
        _set(params, path, take(f"{prefix}.{name}", kind))
    if enc.projects_embeddings:   # ELECTRA's embeddings_project (beside `embeddings`)
        _set(params, ("embeddings", "embeddings_project"),
             take(f"{prefix}.embeddings_project", "dense"))
    table = params["embeddings"]["position_embeddings"]["embedding"]
    offset = position_offset(hf)
    params["embeddings"]["position_embeddings"]["embedding"] = table[offset:]
    layers = []
    for i in range(enc.num_layers):
        layer: dict = {}
        for name, path, kind in LAYER:
            _set(layer, path, take(f"{prefix}.encoder.layer.{i}.{name}", kind))
        layers.append(layer)
    params["encoder"] = stack_layers(layers, enc.scan_layers)
    missing = []
    for name, path, kind in (tuple((f"{prefix}.{n}", p, k) for n, p, k in POOLER)
                             + layout["heads"]):
        module = take(name, kind, required=False)
        if module is None:
            missing.append(path[0])
        else:
            _set(params, path, module)
    if layout["mlm_bias"] and layout["mlm_bias"] in tensors:
        params["mlm_bias"] = tensors[layout["mlm_bias"]]
        used.add(layout["mlm_bias"])
    else:
        missing.append("mlm_bias")
    missing += [h for h in ("mlm_transform", "mlm_layer_norm", "nsp")
                if h not in params and h not in missing]
    unused = sorted(k for k in tensors if k not in used and not _tied_or_buffer(k))
    return params, missing, unused


def _tied_or_buffer(key: str) -> bool:
    """The decoder (tied to the word embeddings) and non-weight buffers."""
    return key.endswith(("decoder.weight", "decoder.bias", "position_ids", "token_type_ids"))


def check_shapes(params: dict, reference: dict) -> None:
    import jax
    flat = dict(jax.tree_util.tree_flatten_with_path(reference)[0])
    for path, value in jax.tree_util.tree_flatten_with_path(params)[0]:
        want = flat[path].shape
        if tuple(value.shape) != tuple(want):
            name = "/".join(str(getattr(k, "key", k)) for k in path)
            raise KjaxError(f"imported {name} has shape {tuple(value.shape)} but the config "
                            f"implies {tuple(want)}; the folder's config.json and weights "
                            f"disagree")


def kjax_config(base, enc: EncoderConfig, name: str):
    """`base` (a loaded kjax config) with the imported model's settings."""
    import copy
    config = copy.deepcopy(base)
    m = config.model
    for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size", "dropout_rate", "embedding_size",
                "attention_dropout_rate", "layer_norm_eps", "initializer_range", "scan_layers",
                "input_mode", "num_pos_tags", "max_tokens_per_morpheme"):
        m[key] = getattr(enc, key)
    mode = input_mode(enc.input_mode)   # what the mode requires of the base config
    if config.tokenizer.scheme not in mode.schemes:
        config.tokenizer.scheme = mode.schemes[0]
    if config.train.mlm_loss not in mode.mlm_losses:
        config.train.mlm_loss = mode.mlm_losses[0]
    if config.tokenizer.scheme == "multihot" and config.data.mask_unit == "token":
        config.data.mask_unit = "morpheme"   # a token unit would split its morphemes
    config.name = name
    if not mx.is_multihot(enc):   # multihot: tokenizer.vocab_size is the BPE size (§2.1)
        config.tokenizer.vocab_size = enc.vocab_size
    config.data.max_seq_len = min(config.data.max_seq_len, enc.max_position_embeddings)
    return config


def import_tokenizer(hf_dir: str, hf: dict, workdir: str, config) -> str | None:
    """Copies the folder's tokenizer (tokenizer.json, or one built from
    vocab.txt) to `workdir/tokenizer.json` and points the config at it
    (tokenizer.scheme='imported', kjax/tokens/imported.py); for a model with
    one token-type row (RoBERTa) its pairs get type 0 throughout. A kjax folder
    (kjax_input_mode recorded) keeps kjax's own scheme; a folder without a
    tokenizer keeps the base config's. Returns the file written, or None."""
    from kjax.tokens.imported import ImportedTokenizer, tokenizer_json_from_folder
    if "kjax_input_mode" in hf or "imported" not in input_mode(config).schemes:
        return None   # kjax's own export: its tokenizer is a kjax scheme
    text = tokenizer_json_from_folder(hf_dir)
    if text is None:
        return None
    if hf.get("type_vocab_size", 2) == 1:   # one token-type row: pairs are all segment 0
        from kjax.tokens.imported import single_segment
        text = single_segment(text)
    target = paths.join(workdir, "tokenizer.json")
    if not paths.is_remote(target):
        target = os.path.abspath(target)
    paths.write_text(target, text)
    tok = ImportedTokenizer(target)   # fails here, in one line, on an unusable tokenizer
    if tok.vocab_size > config.model.vocab_size:
        raise KjaxError(f"{hf_dir}: the tokenizer has {tok.vocab_size} tokens but the model's "
                        f"embedding only {config.model.vocab_size} rows")
    config.tokenizer.scheme, config.tokenizer.path = "imported", target
    return target


def write_config_file(config, path: str, source: str) -> None:
    """The import's config file; the tokenizer it copied beside it named
    `{run}/tokenizer.json`, so the folder works moved (kjax/pretrain/run_folder.py)."""
    from kjax.config.recorded import write_config_file as write
    from kjax.pretrain.run_folder import named_in_folder
    write(named_in_folder(config, paths.parent(path)), path, f"Written by `kjax import --hf {source}`: the imported model's settings\n"
                        f"(model.*) on top of the base config; tokenizer.scheme='imported' when the\n"
                        f"folder had a tokenizer (copied to tokenizer.path): docs/EXPORT.md.")


def fresh_params(config, model, names: list[str], mesh=None, tx=None, shardings=None) -> dict:
    """The modules `names` as `init_state` initialises them, by `init_state`
    itself (kjax/train/state.py): the same program, key and layout, so an
    imported model's new heads equal a fresh run's bit for bit (XLA's fusion of
    the initialisers follows the state's layout, sliced under
    mesh.shard_update, and a separately compiled init can differ in the last
    bit). A caller holding the run's mesh, optimizer and state shardings
    passes them, sparing their construction and a trace."""
    import jax
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_optimizer
    mesh = make_mesh(config) if mesh is None else mesh
    tx = make_optimizer(config.train) if tx is None else tx
    state, _ = init_state(config, mesh, model, tx, shardings)
    return jax.device_get({k: state["params"][k] for k in names})


def check_empty(workdir: str) -> str:
    """`workdir/checkpoints`, refused when it already holds checkpoints."""
    ckpt_dir = paths.join(workdir, "checkpoints")
    if paths.listdir(ckpt_dir):
        raise KjaxError(f"{ckpt_dir} already holds checkpoints; pass an empty --out")
    return ckpt_dir


def save_imported(config, found: dict, workdir: str, config_out: str | None, source: str
                  ) -> tuple[list[str], str]:
    """Writes `workdir/checkpoints/0` (the `found` params, every module they
    lack as a fresh `kjax train` starts it) and the config file. Returns
    (the modules initialised, as "a/b" paths; the config file)."""
    import jax
    from flax import traverse_util
    from kjax.checkpoint.manager import Checkpointer
    from kjax.config.platform_defaults import resolved
    from kjax.model.arch import architecture
    from kjax.objectives import check_config
    from kjax.parallel.mesh import make_mesh
    from kjax.train import ema
    from kjax.train.state import abstract_state, make_model, make_optimizer
    check_config(config)
    # Models are built from resolved configs; the file keeps the auto values, for
    # the platform `kjax train` runs on to resolve (they change no parameter).
    built = resolved(config, keys=architecture(config).auto_keys)
    tx = make_optimizer(built.train)
    model = make_model(built, False)
    # The exact structure `kjax train` restores (traced, nothing compiled).
    mesh = make_mesh(built)
    target, shardings = abstract_state(built, mesh, model, tx)
    check_shapes(found, target["params"])
    have = traverse_util.flatten_dict(found)
    want = traverse_util.flatten_dict(target["params"])
    absent = [p for p in want if p not in have]
    fresh = {}
    if absent:
        fresh = traverse_util.flatten_dict(fresh_params(
            built, model, sorted({p[0] for p in absent}), mesh, tx, shardings))
    params = traverse_util.unflatten_dict({p: have[p] if p in have else fresh[p] for p in want})
    # A module is named at the first level where the source has nothing of it.
    held = {h[:i] for h in have for i in range(1, len(h) + 1)}
    initialised = sorted({"/".join(p[:next(i for i in range(1, len(p) + 1) if p[:i] not in held)])
                          for p in absent})
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
    _, dropout_rng = jax.random.split(jax.random.key(config.train.seed))  # as init_state
    state = ema.with_ema(built.train, {   # its EMA, if the config keeps one: the params
        "step": np.zeros((), np.int32), "params": params,
        "opt_state": tx.init(params),   # fresh AdamW: zero moments, count 0
        "rng": jax.random.key_data(dropout_rng)})
    state = jax.device_put(state, shardings)
    checkpoints = Checkpointer(paths.join(workdir, "checkpoints"),
                               config.train.checkpoint_every, config.train.keep_checkpoints)
    checkpoints.save(0, state, FRESH_LOADER_STATE, force=True)
    checkpoints.close()
    config_out = config_out or paths.join(workdir, "kjax_config.py")
    write_config_file(config, config_out, source)
    return initialised, config_out


def import_hf(hf_dir: str, workdir: str, base_config, config_out: str | None = None) -> dict:
    """Converts `hf_dir` and writes `workdir/checkpoints/0` + a config file."""
    hf = {**read_hf_config(hf_dir), "_dir": hf_dir}
    enc = encoder_config(hf, base_config.model.scan_layers)
    tensors = read_hf_weights(hf_dir)
    found, missing, unused = hf_to_params(tensors, hf, enc)
    config = kjax_config(base_config, enc, os.path.basename(os.path.normpath(hf_dir)))
    ckpt_dir = check_empty(workdir)
    tokenizer = import_tokenizer(hf_dir, hf, workdir, config)
    initialised, config_out = save_imported(config, found, workdir, config_out, hf_dir)
    missing += [k for k in initialised if k not in missing]
    report = {"source": os.path.abspath(hf_dir), "model_type": hf["model_type"],
              "checkpoint": paths.join(ckpt_dir, "0"), "config": config_out,
              "position_offset": position_offset(hf), "tokenizer": tokenizer,
              "initialised": missing,
              "unused_source_tensors": unused}
    paths.write_text(paths.join(workdir, "import.json"),
                     json.dumps(report, ensure_ascii=False, indent=1))
    return report
