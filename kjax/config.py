"""One config tree for every verb (MaxText style), written as Python files in
`tpu_configs/` (big_vision style: `get_config()` returns a ConfigDict).

`load_config(path, overrides)` reads the file, applies `--config.a.b=value`
overrides and validates the result before anything is compiled, so a typo
costs a one-line error, not a compile.
"""
from __future__ import annotations

import ast
import os
import types

import ml_collections

from kjax import paths
from kjax.errors import KjaxError

ConfigDict = ml_collections.ConfigDict

REMAT_POLICIES = (
    "none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable",
    "nothing_saveable", "everything_saveable",
)
DTYPES = ("float32", "bfloat16", "float16")


def base_config() -> ConfigDict:
    """Every key a config may set, with defaults. Presets override these."""
    c = ConfigDict()
    c.name = "kjax"

    c.model = m = ConfigDict()
    m.vocab_size = 32000
    m.hidden_size = 768
    m.num_layers = 12
    m.num_heads = 12
    m.intermediate_size = 3072
    m.max_position_embeddings = 512
    m.type_vocab_size = 2
    m.dropout_rate = 0.1
    m.attention_dropout_rate = 0.1
    m.layer_norm_eps = 1e-12
    m.initializer_range = 0.02
    # Input generator: "onehot" (BERT: one token per position) or "multihot"
    # (UKnowBERT, METHODS §2.3: one morpheme per position, Eq. 3–4).
    m.input_mode = "onehot"
    m.num_pos_tags = 64           # POS tag embedding rows (kjax.morph.tags.NUM_TAGS)
    m.max_tokens_per_morpheme = 16  # E_inpos rows; later tokens share the last row
    m.dtype = "bfloat16"          # compute dtype of activations and matmuls
    m.param_dtype = "float32"     # parameters and optimizer state
    m.scan_layers = True          # nn.scan over layers: O(1) compile in depth
    m.remat_policy = "none"       # see REMAT_POLICIES
    m.attention_impl = "auto"     # auto | xla | dot_product | flash (kjax/model/attention_core.py)
    # Attention-logit manipulation (METHODS §1.2, Eq. 1): the batch carries B;
    # bf is a scalar, or one value per layer in shake_factor_per_layer.
    # 0 means plain attention (bit-identical, no extra cost).
    m.shake_factor = 0.0
    m.shake_factor_per_layer = ()

    # Where the Eq. 1 matrix B comes from (METHODS §1.3–1.5); bf is model.shake_factor.
    c.shake = k = ConfigDict()
    k.variant = "none"            # none | pos (postposition→substantive pairs) | random
    k.boost_prem = 1.0            # weight of group 1 (JKS, JKO, JX)
    k.group3 = True               # XPN/MM* → the substantive they modify
    k.tag_weights = ConfigDict()  # per-tag overrides, e.g. {"JKB": 0.5}
    k.p = 0.08                    # random variant: share of query positions
    k.position_variant = "none"   # none | shared_position (§1.5 variant 5)
    k.layout = "dense"            # B in the batch: dense [seq, seq] | pairs (per query, O(seq))

    # UKnowBERT's knowledge objectives (METHODS §2.5): a head exists when its
    # weight is > 0. Resource files in the formats of kjax/knowledge/data/README.md;
    # "" uses the samples shipped with kjax.
    c.knowledge = g = ConfigDict()
    g.hypernym_weight = 0.0
    g.sense_weight = 0.0
    g.verb_weight = 0.0
    g.hypernyms = ""
    g.sense_vectors = ""
    g.case_frames = ""
    g.sense_dim = 16              # must match the sense-vector file
    g.max_hypernym = 20           # nouns per sequence with a hypernym target
    g.max_sense = 20
    g.max_hypernyms_per_noun = 8

    c.tokenizer = t = ConfigDict()
    t.scheme = "sentencepiece"    # sentencepiece | morph-sp | multihot (kjax/tokens/factory.py)
    t.vocab_size = 32000          # multihot: the BPE size before the §2.1 rewriting
    # multihot @syllable tokens: characters seen >= max(count, share · all syllables)
    # times in the training text; 1e-8 is the thesis's 50 in its ~5e9 syllables
    # (METHODS §2.1), so a corpus under 1e8 syllables keeps every one it saw.
    t.min_syllable_count = 1
    t.min_syllable_share = 1e-8
    t.model_type = "unigram"
    t.character_coverage = 0.9995
    t.input_sentence_size = 2_000_000
    t.path = "runs/tokenizer/sp"  # model prefix: writes .model and .vocab

    c.data = d = ConfigDict()
    d.corpus = ""                 # files/globs (comma separated), .gz ok; "konlpy" = demo corpus;
                                  # "tfds:NAME/CONFIG[:SPLIT]" = a prepared TFDS dataset
    d.tfds_data_dir = ""          # where that TFDS dataset was prepared ("" = tfds' default)
    d.document_per_file = False   # True: a file is a document, blank lines ignored
    d.dir = "runs/data"           # prepared ArrayRecord shards
    d.max_seq_len = 128
    d.max_predictions_per_seq = 20
    d.masked_lm_prob = 0.15
    d.short_seq_prob = 0.1
    d.nsp_prob = 0.5              # share of NSP negatives (B from another document)
    d.max_targets_per_position = 8  # multihot: MLM targets kept per masked morpheme
    d.mask_unit = "eojeol"        # eojeol (whole word) | morpheme | token
    d.split_sentences = False     # split each corpus line into sentences with Kiwi
    d.masking = "dynamic"         # "dynamic" (in the loader) | "static" (stored)
    d.dupe_factor = 5             # static masking: copies with different masks
    d.docs_per_chunk = 2000       # NSP negatives come from the same chunk (bounded memory)
    d.examples_per_shard = 20000
    d.eval_every_nth_doc = 50     # every n-th document is held out for eval
    d.seed = 12345

    c.train = r = ConfigDict()
    r.batch_size = 128            # global batch
    r.num_steps = 100_000
    r.learning_rate = 1e-4
    r.warmup_steps = 10_000
    r.weight_decay = 0.01
    r.b1 = 0.9
    r.b2 = 0.999
    r.eps = 1e-6
    r.grad_clip_norm = 1.0
    r.nsp_weight = 1.0
    r.mlm_loss = "ce"             # ce (one-hot) | eq9 | bce | summed_ce (multihot, METHODS §2.4)
    r.seed = 0
    r.log_every = 100
    r.eval_every = 5000
    r.eval_batches = 20
    r.checkpoint_every = 5000
    r.keep_checkpoints = 3
    r.peak_flops = 0.0            # per device; 0 = datasheet (TPU/GPU) or measured (CPU)
    r.prefetch = 2                # batches prepared ahead on the host

    c.mesh = h = ConfigDict()
    h.data = -1                   # -1: all devices not used by the other axes
    h.fsdp = 1
    h.tensor = 1
    return c


def preset_dirs() -> list[str]:
    """Where the presets of tpu_configs/ are: inside an installed wheel
    (kjax/tpu_configs, setup.py ships them) or beside a source checkout."""
    package = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(package, "tpu_configs"),
            os.path.join(os.path.dirname(package), "tpu_configs")]


def resolve_config_path(path: str) -> str:
    """`path` when it exists (a local file or a URL); else, for a bare preset
    name (`demo`, `demo.py`, `tpu_configs/demo.py`), the shipped preset, so
    the commands of the docs work from any folder with an installed wheel."""
    if paths.isfile(path):
        return path
    if not paths.is_remote(path) and os.path.dirname(os.path.normpath(path)) in ("", "tpu_configs"):
        file = os.path.basename(path) if path.endswith(".py") else os.path.basename(path) + ".py"
        for folder in preset_dirs():
            if os.path.isfile(os.path.join(folder, file)):
                return os.path.join(folder, file)
    raise KjaxError(f"config file {path!r} not found; pass a file from tpu_configs/, "
                    f"e.g. --config tpu_configs/demo.py")


def load_module(path: str, name: str = "kjax_user_config") -> types.ModuleType:
    """Executes a config file (local or a URL) as a module of its own."""
    path = resolve_config_path(path)
    module = types.ModuleType(name)
    module.__file__ = path
    exec(compile(paths.read_text(path), path, "exec"), module.__dict__)
    return module


def _load_module(path: str):
    module = load_module(path)
    if not hasattr(module, "get_config"):
        raise KjaxError(f"config file {path} has no get_config() function")
    return module


def _merge(base: ConfigDict, update: ConfigDict | dict, prefix: str, path: str) -> None:
    for key, value in update.items():
        full = f"{prefix}{key}"
        if key not in base:
            raise KjaxError(f"{path}: config key {full!r} does not exist; valid keys under "
                            f"{prefix.rstrip('.') or 'the root'}: {', '.join(sorted(base.keys()))}")
        if isinstance(base[key], ConfigDict):
            _merge(base[key], value, full + ".", path)
        else:
            base[key] = value


def _parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # bare strings: --config.data.corpus=foo.txt


def apply_override(config: ConfigDict, assignment: str) -> None:
    """Apply one `a.b.c=value` override; unknown keys are an error."""
    if "=" not in assignment:
        raise KjaxError(f"override {assignment!r} must look like --config.key=value")
    dotted, text = assignment.split("=", 1)
    dotted = dotted.removeprefix("--").removeprefix("config.")
    node, keys = config, dotted.split(".")
    for depth, key in enumerate(keys):
        where = ".".join(keys[:depth]) or "the root"
        if not isinstance(node, ConfigDict) or key not in node:
            valid = ", ".join(sorted(node.keys())) if isinstance(node, ConfigDict) else "(a leaf)"
            raise KjaxError(f"config key {dotted!r} does not exist; valid keys under {where}: {valid}")
        if depth < len(keys) - 1:
            node = node[key]
    old, new = node[keys[-1]], _parse_value(text)
    if isinstance(old, bool) and isinstance(new, str):
        new = new.lower() in ("1", "true", "yes")
    elif isinstance(old, float) and isinstance(new, int) and not isinstance(new, bool):
        new = float(new)
    elif isinstance(old, str) and not isinstance(new, str):
        new = text
    try:
        node[keys[-1]] = new
    except TypeError as e:
        raise KjaxError(f"config key {dotted!r}: cannot set {text!r} ({e})") from None


def load_config(path: str, overrides: list[str] | None = None) -> ConfigDict:
    user = _load_module(path).get_config()
    config = base_config()
    _merge(config, user, "", path)
    for assignment in overrides or []:
        apply_override(config, assignment)
    validate(config)
    return config


def shaking_enabled(c: ConfigDict) -> bool:
    """Whether the model applies Eq. 1 during pretraining (any bf ≠ 0)."""
    m = c.model
    return m.shake_factor != 0 or any(x != 0 for x in m.shake_factor_per_layer)


def knowledge_enabled(c: ConfigDict) -> bool:
    g = c.knowledge
    return bool(g.hypernym_weight or g.sense_weight or g.verb_weight)


def validate(c: ConfigDict) -> None:
    """Cheap static checks; mesh/device checks live in kjax.parallel.mesh."""
    m, d, r = c.model, c.data, c.train
    if m.hidden_size % m.num_heads:
        raise KjaxError(f"model.hidden_size={m.hidden_size} is not divisible by "
                        f"model.num_heads={m.num_heads}")
    for key in ("dtype", "param_dtype"):
        if m[key] not in DTYPES:
            raise KjaxError(f"model.{key}={m[key]!r}; choose one of {DTYPES}")
    if m.remat_policy not in REMAT_POLICIES:
        raise KjaxError(f"model.remat_policy={m.remat_policy!r}; choose one of {REMAT_POLICIES}")
    if m.shake_factor_per_layer and len(m.shake_factor_per_layer) != m.num_layers:
        raise KjaxError(f"model.shake_factor_per_layer has {len(m.shake_factor_per_layer)} "
                        f"values for {m.num_layers} layers; give one per layer or ()")
    from kjax.model.config import ATTENTION_IMPLS
    if m.attention_impl not in ATTENTION_IMPLS:
        raise KjaxError(f"model.attention_impl={m.attention_impl!r}; choose one of "
                        f"{ATTENTION_IMPLS}")
    if m.attention_impl in ("dot_product", "flash") and m.attention_dropout_rate > 0:
        raise KjaxError(f"model.attention_impl={m.attention_impl!r} has no attention dropout "
                        f"(training would run the explicit path): set "
                        f"model.attention_dropout_rate=0, or attention_impl='auto'")
    k = c.shake
    if k.layout not in ("dense", "pairs"):
        raise KjaxError(f"shake.layout={k.layout!r}; choose dense or pairs")
    if k.variant not in ("none", "pos", "random"):
        raise KjaxError(f"shake.variant={k.variant!r}; choose none, pos or random")
    if k.position_variant not in ("none", "shared_position"):
        raise KjaxError(f"shake.position_variant={k.position_variant!r}; choose none or "
                        f"shared_position")
    from kjax.shake.matrix import check_weights
    check_weights(k)
    needs_pos = k.variant == "pos" or k.position_variant != "none"
    if needs_pos and c.tokenizer.scheme == "sentencepiece":
        raise KjaxError("shake.variant='pos' and shake.position_variant need POS tags: set "
                        "tokenizer.scheme='morph-sp' or 'multihot' (plain sentencepiece has none)")
    if shaking_enabled(c) and k.variant == "none":
        raise KjaxError("model.shake_factor is non-zero but shake.variant='none' gives no B; "
                        "set shake.variant to 'pos' or 'random'")
    if d.max_seq_len > m.max_position_embeddings:
        raise KjaxError(f"data.max_seq_len={d.max_seq_len} exceeds "
                        f"model.max_position_embeddings={m.max_position_embeddings}")
    if m.input_mode not in ("onehot", "multihot", "merged"):
        raise KjaxError(f"model.input_mode={m.input_mode!r}; choose onehot, multihot or merged")
    if m.input_mode == "merged":  # SHAKE §1.5 variant 6: merges need the POS pairs of morph-sp
        if c.tokenizer.scheme != "morph-sp":
            raise KjaxError(f"model.input_mode='merged' (substantive + postposition as one "
                            f"position) needs tokenizer.scheme='morph-sp', not "
                            f"{c.tokenizer.scheme!r}")
        if k.position_variant != "none":
            raise KjaxError("model.input_mode='merged' and shake.position_variant both move "
                            "postpositions; use one of them")
    if m.input_mode == "multihot" and c.tokenizer.scheme != "multihot":
        raise KjaxError(f"model.input_mode='multihot' needs tokenizer.scheme='multihot' "
                        f"(got {c.tokenizer.scheme!r}): positions are its morphemes")
    # A merged position has several target tokens, like a multi-hot morpheme.
    allowed = ("eq9", "bce", "summed_ce") if m.input_mode != "onehot" else ("ce",)
    if r.mlm_loss not in allowed:
        raise KjaxError(f"train.mlm_loss={r.mlm_loss!r} with model.input_mode={m.input_mode!r};"
                        f" choose one of {allowed}")
    g = c.knowledge
    if (g.hypernym_weight or g.sense_weight or g.verb_weight) and m.input_mode != "multihot":
        raise KjaxError("the knowledge objectives work on morpheme positions: set "
                        "model.input_mode='multihot' (and tokenizer.scheme='multihot')")
    if d.mask_unit not in ("eojeol", "morpheme", "token"):
        raise KjaxError(f"data.mask_unit={d.mask_unit!r}; choose eojeol, morpheme or token")
    if c.tokenizer.scheme == "multihot" and d.mask_unit == "token":
        raise KjaxError("data.mask_unit='token' would split multi-hot morphemes; use "
                        "'morpheme' or 'eojeol' with tokenizer.scheme=multihot")
    if d.masking not in ("dynamic", "static"):
        raise KjaxError(f"data.masking={d.masking!r}; choose 'dynamic' or 'static'")
    if not 0.0 < d.masked_lm_prob < 1.0:
        raise KjaxError(f"data.masked_lm_prob={d.masked_lm_prob} must be in (0, 1)")
    if r.batch_size <= 0 or r.num_steps <= 0:
        raise KjaxError("train.batch_size and train.num_steps must be positive")
    if r.warmup_steps > r.num_steps:
        raise KjaxError(f"train.warmup_steps={r.warmup_steps} exceeds "
                        f"train.num_steps={r.num_steps}")
