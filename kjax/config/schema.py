"""Every key of the one config tree (MaxText style: one tree for every verb —
pretraining, fine-tuning, analysis), with its default, type, allowed values
and a one-line meaning. `defaults()` is built from it; `validate.py` checks
types and ranges from it; `kjax config show` prints it.

What a key is, and the shorthands below, are in kjax/config/schema_keys.py.
Keys whose allowed values belong to a
registry (model.arch: kjax/model/arch; model.input_mode: kjax/inputs;
train.mlm_loss: kjax/objectives) are checked by that registry, so adding an
architecture or an input mode never touches this file.
"""
from __future__ import annotations

from kjax.config.schema_keys import Key, at_least, positive, share  # noqa: F401 (Key: kjax.config)

DTYPES = ("float32", "bfloat16", "float16")
ATTENTION_IMPLS = ("auto", "xla", "dot_product", "flash")
OPTIMIZERS = ("adamw", "lamb", "adafactor", "stable_adamw")   # kjax/train/optimizers.py
SCHEDULES = ("linear", "cosine", "wsd", "constant")           # kjax/train/schedules.py
REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable",
                  "nothing_saveable", "everything_saveable")
TOKENIZER_SCHEMES = ("sentencepiece", "morph-sp", "multihot", "imported")
MESH_AXES = ("data", "fsdp", "tensor")
# Logical axis → mesh axes (MaxText style): the model names axes, these rules
# place them. data/fsdp split the batch; fsdp shards parameters on `embed`;
# tensor splits heads, FFN and vocabulary (Megatron style).
LOGICAL_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),      # activations keep the hidden axis whole
    ("embed", "fsdp"),        # parameters: FSDP shards the hidden axis
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("layers", None),
)

MODEL = {
    "arch": Key("bert", "the encoder recipe, an architecture of kjax/model/arch: bert "
                "(post-LN, GELU, learned positions, token types, biases, NSP head; "
                "kjax/model/encoder.py) or modern (ModernBERT: pre-LN, RoPE, GeGLU, no biases, "
                "local/global attention, MLM only; kjax/model/modern.py) or electra (a "
                "BERT-recipe discriminator trained by replaced-token detection against a small "
                "generator that shares its embeddings; kjax/model/electra.py)"),
    "vocab_size": at_least(1, 32000, "rows of the token embedding (the tokenizer's vocabulary size)"),
    "hidden_size": at_least(1, 768, "width of every layer (H)"),
    "embedding_size": at_least(0, 0, "width of the token/position/type embeddings (E), projected "
                               "to hidden_size after their LayerNorm (ELECTRA's "
                               "embeddings_project; KoELECTRA-small: 128 vs 256); 0: hidden_size. "
                               "arch bert or electra"),
    "num_layers": at_least(1, 12, "transformer layers"),
    "num_heads": at_least(1, 12, "attention heads per layer (hidden_size must divide by it)"),
    "intermediate_size": at_least(1, 3072, "FFN width"),
    "max_position_embeddings": at_least(1, 512, "rows of the position embedding (modern: the "
                                        "longest context; RoPE has no table)"),
    "type_vocab_size": at_least(1, 2, "token-type (segment) embedding rows"),
    "dropout_rate": share(0.1, "dropout on embeddings, attention output and FFN"),
    "attention_dropout_rate": share(0.1, "dropout on the attention probabilities (keep bits "
                                    "hashed from (seed, step, layer, example, head, query, key): "
                                    "the same on every attention path; kjax/model/dropout_hash.py)"),
    "attention_dropout_broadcast": Key(False, "one attention-dropout mask per layer and step, "
                                       "shared by every example and head (HF Flax BERT's "
                                       "recipe: a different, weaker regulariser); false: a mask "
                                       "per example and head, as BERT's TensorFlow code"),
    "layer_norm_eps": positive(1e-12, "LayerNorm epsilon"),
    "initializer_range": positive(0.02, "std of the truncated-normal initialiser"),
    "input_mode": Key("onehot", "how tokens become model positions: a mode of kjax/inputs "
                      "(onehot, multihot, merged, shared_position)"),
    "num_pos_tags": at_least(1, 64, "POS-tag embedding rows (multihot input, Eq. 4)"),
    "max_tokens_per_morpheme": at_least(1, 16, "E_inpos rows (Eq. 3); later tokens share the "
                                        "last row"),
    "dtype": Key("bfloat16", "compute dtype of activations and matmuls", choices=DTYPES),
    "param_dtype": Key("float32", "dtype of parameters and optimizer state", choices=DTYPES),
    "scan_layers": Key(True, "nn.scan over layers: compile time independent of depth (arch "
                       "bert and electra; modern's layers differ and are always unrolled)"),
    "scan_unroll": Key(-1, "layers per iteration of the scanned loop (scan_layers): the "
                       "parameter layout stays stacked, so any value restores the same "
                       "checkpoint; 0: all layers (no loop left, as unrolled layers run); -1: "
                       "the platform's (GPU 0, else 1; kjax/config/platform_defaults.py, "
                       "recorded by kjax train). Arch bert and electra: modern refuses any "
                       "value but -1", min=0, special=(-1,)),
    "remat_policy": Key("none", "rematerialisation of each layer in the backward pass",
                        choices=REMAT_POLICIES),
    "attention_impl": Key("auto", "which attention runs: xla (the explicit reference), "
                          "dot_product (jax.nn.dot_product_attention), flash (Pallas, Eq. 1 "
                          "and attention dropout inside) or auto: on GPU cuDNN for calls "
                          "without Eq. 1 and attention dropout and, for calls with them, the "
                          "kernel where a GPU measured it faster than the explicit path, else "
                          "xla; xla on CPU and TPU (kjax/model/attention_core.py)",
                          choices=ATTENTION_IMPLS),
    "attention_tiles": Key({}, "the flash kernels' tiles per call signature (flash_tuning.py "
                           "names them), each 'F/DQ/DKV' with F, DQ, DKV = outer,inner,warps,"
                           "stages, or 'table' for the built-in table; a signature not listed "
                           "is timed on the GPU at its first compile (cached), '*' fixes every "
                           "call; kjax train records what it ran with, so a resume keeps them"),
    "rope_theta": positive(160_000.0, "modern: RoPE base of the global-attention layers"),
    "local_rope_theta": positive(10_000.0, "modern: RoPE base of the local-attention layers"),
    "local_attention": at_least(0, 128, "modern: window of the local layers (a query sees keys "
                                "within local_attention // 2 positions; 0: every layer global)"),
    "global_attn_every_n_layers": at_least(1, 3, "modern: layer i attends globally when "
                                           "i % n == 0, the others locally (1: all global)"),
    "generator_hidden_size": at_least(0, 0, "electra: the generator's width (0: hidden_size "
                                      "/ 4, ELECTRA-Small's ¼; the paper: ¼–⅓)"),
    "generator_num_layers": at_least(0, 0, "electra: the generator's layers (0: num_layers)"),
    "generator_num_heads": at_least(0, 0, "electra: the generator's heads (0: one per 64 of "
                                    "its width, at least 1)"),
    "generator_intermediate_size": at_least(0, 0, "electra: the generator's FFN width (0: 4 × "
                                            "its width)"),
    "shake_factor": Key(0.0, "bf of Eq. 1 in every layer during pretraining (0: plain "
                        "attention, bit-identical)"),
    "shake_factor_per_layer": Key((), "one bf per layer instead of shake_factor (() = unused)"),
}

SHAKE = {
    "variant": Key("none", "where B of Eq. 1 comes from: pos (postposition→substantive "
                   "pairs), random, or none", choices=("none", "pos", "random")),
    "boost_prem": at_least(0, 1.0, "B weight of group 1 (JKS, JKO, JX)"),
    "group3": Key(True, "pair XPN/MM* with the substantive they modify"),
    "tag_weights": Key({}, "B weight per POS tag, overriding the groups, e.g. {'JKB': 0.5}"),
    "p": Key(0.08, "random variant: share of query positions", min=0, max=1, open_min=True),
    "layout": Key("dense", "B in the batch: dense [seq, seq] (seq² bytes) or pairs (per query "
                  "a key run and a weight, 9 bytes; kjax/shake/matrix.py)",
                  choices=("dense", "pairs")),
}

KNOWLEDGE = {
    "hypernym_weight": at_least(0, 0.0, "weight of the hypernym objective (0: no head)"),
    "sense_weight": at_least(0, 0.0, "weight of the sense-vector objective (0: no head)"),
    "verb_weight": at_least(0, 0.0, "weight of the verb-relation objective (0: no head)"),
    "hypernyms": Key("", "hypernym TSV (\"\": the sample shipped with kjax)"),
    "sense_vectors": Key("", "sense-vector TSV (\"\": the sample shipped with kjax)"),
    "case_frames": Key("", "case-frame TSV (\"\": the sample shipped with kjax)"),
    "sense_dim": at_least(1, 16, "dimension of the sense vectors (must match the file)"),
    "max_hypernym": at_least(1, 20, "nouns per sequence with a hypernym target"),
    "max_sense": at_least(1, 20, "nouns per sequence with a sense-vector target"),
    "max_hypernyms_per_noun": at_least(1, 8, "hypernym targets kept per noun"),
}

TOKENIZER = {
    "scheme": Key("sentencepiece", "how text becomes tokens (kjax/tokens/factory.py)",
                  choices=TOKENIZER_SCHEMES),
    "vocab_size": at_least(1, 32000, "vocabulary to train (multihot: BPE size before §2.1)"),
    "min_syllable_count": at_least(1, 1, "multihot: a syllable seen this often is a token"),
    "min_syllable_share": share(1e-8, "multihot: ... or this share of all syllables"),
    "model_type": Key("unigram", "sentencepiece model type",
                      choices=("unigram", "bpe", "char", "word")),
    "character_coverage": Key(0.9995, "sentencepiece character coverage", min=0, max=1,
                              open_min=True),
    "input_sentence_size": at_least(0, 2_000_000, "sentences sentencepiece samples (0: all)"),
    "path": Key("runs/tokenizer/sp", "tokenizer file prefix (.model/.vocab, .multihot.txt); "
                "imported: the tokenizer.json itself"),
    "corpus": Key("", "text the vocabulary is trained on, as data.corpus (\"\": data.corpus); "
                  "e.g. more text than is worth pretraining on, for coverage"),
}

DATA = {
    "corpus": Key("", "files/globs (comma separated, .gz, gs://), a packaged corpus (konlpy, "
                  "chatterbot-ko, urimalsam: kjax/text/corpus.py) or "
                  "tfds:NAME/CONFIG[:SPLIT]"),
    "tfds_data_dir": Key("", "where a tfds: corpus was prepared (\"\": tfds' default)"),
    "document_per_file": Key(False, "each file is one document (blank lines ignored)"),
    "dir": Key("runs/data", "prepared ArrayRecord shards"),
    "max_seq_len": at_least(5, 128, "tokens per example ([CLS] A [SEP] B [SEP] needs 5)"),
    "max_predictions_per_seq": at_least(1, 20, "MLM prediction slots per example"),
    "masked_lm_prob": Key(0.15, "share of units masked (data.mask_schedule: the rate it "
                          "starts at)", min=0, max=1, open_min=True,
                          open_max=True),
    "short_seq_prob": share(0.1, "share of examples with a shorter target length",
                            closed_max=True),
    "nsp_prob": share(0.5, "share of NSP negatives (B from another document)",
                      closed_max=True),
    "max_targets_per_position": at_least(1, 8, "MLM targets kept per masked position "
                                         "(multihot, merged)"),
    "mask_unit": Key("eojeol", "what masking picks whole", choices=("eojeol", "morpheme",
                                                                      "token")),
    "split_sentences": Key(False, "split each corpus line into sentences with Kiwi"),
    "masking": Key("dynamic", "dynamic (drawn in the loader) or static (stored at prepare)",
                   choices=("dynamic", "static")),
    "dupe_factor": at_least(1, 5, "static masking: stored copies with different masks"),
    "docs_per_chunk": at_least(1, 2000, "documents per chunk (NSP negatives come from it)"),
    "eval_every_nth_doc": at_least(2, 50, "every n-th document is held out for eval"),
    "seed": at_least(0, 12345, "seed of examples, shuffling and masks"),
    "sources": Key({}, "a weighted mixture of prepared sources (docs/PRETRAINING.md, \"Source "
                   "mixtures\"): {NAME: {'dir': its prepared folder (default data.dir/NAME), "
                   "'corpus': text `kjax prepare` prepares into that folder, 'weight': w (default "
                   "1)}}; a phase changes one as 'data.sources.NAME.weight'; {}: the one source "
                   "data.dir"),
    "source_temperature": at_least(0, 0.0, "sources: sample source i with probability ∝ "
                                   "weight_i · examples_i^τ (its prepared train examples; "
                                   "mmBERT's τ 0.7 → 0.5 → 0.3 by phase); 0: by weight alone"),
    "mask_schedule": Key("constant", "dynamic masking's rate within a run: constant "
                         "(masked_lm_prob), or linear or cosine from masked_lm_prob to "
                         "final_masked_lm_prob over mask_schedule_steps (docs/PRETRAINING.md, "
                         "\"Mask-rate schedules\")", choices=("constant", "linear", "cosine")),
    "final_masked_lm_prob": Key(0.15, "linear, cosine: the rate the schedule ends at (then kept)",
                                min=0, max=1, open_min=True, open_max=True),
    "mask_schedule_steps": at_least(0, 0, "linear, cosine: the steps from masked_lm_prob to "
                                    "final_masked_lm_prob (0: train.num_steps)"),
    "eval_masked_lm_prob": Key(0.0, "held-out masks drawn at this rate by (data.seed, eval "
                               "example), whatever the training rate, so eval curves compare "
                               "across phases (ModernBERT: 0.15); 0: the masks prepare stored",
                               min=0, max=1, open_max=True),
}

TRAIN = {
    "batch_size": at_least(1, 128, "global batch (examples per step)"),
    "microbatches": at_least(1, 1, "gradient accumulation: the batch is split into this many "
                             "microbatches that run one after another in the step, their "
                             "gradients summed into one update (1: off); the result is the "
                             "whole batch's, so it may change between resumes of a run"),
    "batch_ramp": Key((), "a batch-size ramp: ((until, batch), ...) stages run `batch` "
                      "examples a step until `until` (train.batch_ramp_unit), then "
                      "train.batch_size; each stage one compile, its batch in microbatches of "
                      "batch_size / microbatches rows (kjax/config/batch_ramp.py); (): none"),
    "batch_ramp_unit": Key("tokens", "what a batch_ramp stage's until counts: tokens "
                           "(examples × data.max_seq_len; a stage ends at the first step that "
                           "reaches it) or steps", choices=("tokens", "steps")),
    "num_steps": at_least(1, 100_000, "steps of the schedule (with a batch_ramp: every "
                          "stage's steps; a decay branch, init.mode=continue: the step it ends "
                          "at, its parent's steps included)"),
    "learning_rate": positive(1e-4, "peak learning rate"),
    "warmup_steps": at_least(0, 10_000, "linear warmup steps from 0 to learning_rate (then "
                             "train.schedule: linear decay to 0 by default)"),
    "schedule": Key("linear", "the learning rate after warmup (kjax/train/schedules.py): linear "
                    "or cosine decay to final_lr_fraction·peak at num_steps (BERT: linear), "
                    "wsd (ModernBERT: the peak, then the last decay_fraction of the steps "
                    "decays in decay_shape) or constant; `kjax config show --schedule` prints "
                    "it", choices=SCHEDULES),
    "final_lr_fraction": share(0.0, "the learning rate at num_steps as a share of the peak "
                               "(linear, cosine, wsd)", closed_max=True),
    "decay_fraction": share(0.1, "wsd: share of num_steps in the final decay",
                            closed_max=True),
    "decay_steps": at_least(0, 0, "wsd: the steps of the final decay (0: decay_fraction of "
                            "num_steps; a decay branch, init.mode=continue: every step after "
                            "its parent's, num_steps − that step, resolved when it starts)"),
    "decay_shape": Key("sqrt", "wsd: the decay's shape, linear or sqrt (the factor "
                       "1 - sqrt(progress), ModernBERT's)", choices=("linear", "sqrt")),
    "optimizer": Key("adamw", "the update rule behind global-norm clipping "
                     "(kjax/train/optimizers.py): adamw (BERT), lamb (large-batch BERT; no "
                     "trust ratio or decay on biases and LayerNorm), adafactor (factored second "
                     "moments, no b1/b2/eps) or stable_adamw (ModernBERT's StableAdamW: "
                     "per-tensor update clipping); a resume must keep it", choices=OPTIMIZERS),
    "weight_decay": at_least(0, 0.01, "decoupled weight decay (× the learning rate; not on "
                             "biases, LayerNorm or E_inpos)"),
    "b1": share(0.9, "Adam beta1"),
    "b2": share(0.999, "Adam beta2"),
    "eps": at_least(0, 1e-6, "Adam epsilon"),
    "grad_clip_norm": positive(1.0, "global-norm gradient clipping"),
    "ema_decay": share(0.0, "d of an exponential moving average of the parameters, kept in "
                       "the state and checkpoints (decay min(d, t/(t+10)) at update t; "
                       "kjax/train/ema.py); eval, export, fill-mask, finetune take it with "
                       "--weights ema (0: none; 0.999 averages about the last 1000 steps)"),
    "nsp_weight": at_least(0, 1.0, "weight of the NSP loss (0: MLM only)"),
    "rtd_weight": positive(50.0, "electra: λ, the weight of the replaced-token-detection "
                           "loss beside the generator's MLM loss (ELECTRA: 50)"),
    "mlm_loss": Key("ce", "MLM loss: ce (one target per position) or eq9 | bce | summed_ce "
                    "(several; kjax/objectives/mlm.py)"),
    "seed": at_least(0, 0, "seed of parameters and dropout"),
    "dropout_rng": Key("auto", "bit generator of the dropout masks, seeded from (seed, step) "
                       "either way, so a resumed run is bit-exact: threefry (the same bits on "
                       "every platform and sharding), rbg (XLA's RngBitGenerator: Philox on "
                       "GPU, the hardware generator on TPU; bits differ between platforms) or "
                       "auto (GPU rbg, else threefry; kjax train records the value it resolved, "
                       "kjax/config/platform_defaults.py)", choices=("auto", "threefry", "rbg")),
    "log_every": at_least(1, 100, "steps between logged metrics"),
    "eval_every": at_least(0, 5000, "steps between held-out evaluations (0: never)"),
    "eval_batches": at_least(0, 20, "batches per evaluation (0: all)"),
    "checkpoint_every": at_least(1, 5000, "steps between checkpoints"),
    "keep_checkpoints": at_least(1, 3, "checkpoints kept (the latest)"),
    "peak_flops": at_least(0, 0.0, "per-device peak FLOP/s for MFU (0: datasheet or measured)"),
    "prefetch": at_least(0, 2, "batches prepared ahead on the host"),
    "loader_workers": at_least(0, 0, "grain worker processes building batches (mp_prefetch; "
                               "0: reader threads in the training process); the same batches "
                               "for any value, and a resume may change it (train.packing: keep "
                               "it fixed across resumes of a run)"),
    "packing": Key(False, "pack several examples into each row (first fit; segment ids keep "
                   "attention inside an example, positions restart; kjax/batches/packing.py): "
                   "no NSP, one-hot input, no knowledge heads or B"),
    "profile_steps": Key("", "START:COUNT: a jax.profiler trace of steps START..START+COUNT-1 "
                         "(1-based) into WORKDIR/tensorboard/plugins/profile "
                         "(kjax/train/profiler.py); \"\": none"),
}

MESH = {
    "data": at_least(1, -1, "data-parallel axis size (-1: the devices left)", special=(-1,)),
    "fsdp": at_least(1, 1, "FSDP axis size (-1: the devices left)", special=(-1,)),
    "tensor": at_least(1, 1, "tensor-parallel axis size (-1: the devices left)", special=(-1,)),
    "rules": Key(LOGICAL_RULES, "logical axis → mesh axes, e.g. ('embed', 'fsdp')"),
    "shard_update": Key(True, "ZeRO over mesh.data: params' fp32 copy and optimizer state sliced "
                        "over data, gathered / reduce-scattered once a step, each device "
                        "updating its slice (train/accumulation.py); false: replicated"),
    "fsdp_gather": Key("step", "fsdp > 1, microbatches > 1: parameters gathered once a step, or "
                       "every microbatch (less memory, k× traffic)", choices=("step", "microbatch")),
}

FINETUNE_SHAKE = {
    "variant": Key("pos", "where B comes from while fine-tuning", choices=("pos", "random")),
    "bf_train": Key(0.0, "bf while fine-tuning (0: off)"),
    "bf_infer": Key(0.0, "bf at dev/test inference (0: off)"),
    "boost_prem": at_least(0, 1.0, "pos: B weight of group 1 (JKS, JKO, JX)"),
    "p": Key(0.1, "random: share of tokens selected", min=0, max=1, open_min=True),
    "seed": at_least(0, 0, "random variant's draws at inference"),
    "sweep_train": Key((-0.3, 0.3), "--sweep: fine-tune bf values"),
    "sweep_infer": Key((0.0, 0.3), "--sweep: inference bf values"),
}

FINETUNE = {
    "max_seq_len": at_least(8, 128, "tokens per fine-tuning example"),
    "batch_size": at_least(1, 32, "global batch (a multiple of the mesh's batch shards)"),
    "eval_batch_size": at_least(0, 0, "dev/test batch (0: batch_size)"),
    "epochs": at_least(1, 3, "passes over the training split"),
    "learning_rate": at_least(0, 0.0, "peak learning rate (0: by model.hidden_size: "
                              "<=128 5e-4, <=512 1e-4, else 5e-5)"),
    "warmup_ratio": share(0.1, "share of all steps in linear warmup"),
    "weight_decay": at_least(0, 0.01, "AdamW decoupled weight decay"),
    "grad_clip_norm": positive(1.0, "global-norm gradient clipping"),
    "b1": share(0.9, "Adam beta1"),
    "b2": share(0.999, "Adam beta2"),
    "eps": at_least(0, 1e-6, "Adam epsilon"),
    "classifier_dropout": Key(-1.0, "dropout before the head (< 0: model.dropout_rate)",
                              max=1, open_max=True),
    "eval_every": at_least(0, 0, "steps between dev evaluations (0: once per epoch)"),
    "patience": at_least(0, 2, "evaluations without dev gain before stopping (0: never)"),
    "select_metric": Key("", "dev metric for early stopping (\"\": the task's primary)"),
    "split": Key((0.8, 0.1, 0.1), "train/dev[/test] fractions carved from --train alone"),
    "split_seed": at_least(0, 12345, "seed of that split (fixed while --seeds vary)"),
    "seed": at_least(0, 0, "head init, dropout and data order (--seeds overrides)"),
    "max_examples": at_least(0, 0, "keep the first N examples of each split (0: all)"),
    "checkpoint_every": at_least(0, 0, "steps between checkpoints (0: at every evaluation)"),
    "keep_checkpoints": at_least(1, 1, "checkpoints kept"),
    "log_every": at_least(1, 10, "steps between logged losses"),
    "sts_threshold": Key(3.0, "regress: threshold of the binary F1 (KLUE-STS)"),
    "doc_stride": at_least(1, 128, "qa: tokens between the starts of a context's windows"),
    "max_query_len": at_least(1, 64, "qa: question tokens kept (the rest is cut)"),
    "max_answer_len": at_least(1, 30, "qa: longest answer span, in model positions"),
    "n_best": at_least(1, 20, "qa: start and end candidates per window when decoding"),
    "init_weights": Key("params", "which weights of the --init checkpoint: params, or ema "
                        "(their moving average: a run with train.ema_decay > 0); --weights "
                        "sets it", choices=("params", "ema")),
    "shake": FINETUNE_SHAKE,
}

# Keys that existed once: a config holding one's old default still loads (the
# key is dropped: old WORKDIR/kjax_config.py files), any other value is an error
# that names what replaced it.
RETIRED = {
    "model.attention_auto_flash": (False, "model.attention_impl is the one choice: 'flash' "
                                          "runs the kernel for every call, 'auto' where a "
                                          "GPU measured it faster"),
    "model.attention_logits": ("compute", "the explicit path holds its [b, h, q, k] arrays "
                                          "in model.dtype (the softmax sums in fp32); set "
                                          "model.dtype='float32' for fp32 logits"),
    "shake.position_variant": ("none", "SHAKE variant 5 is model.input_mode='shared_position' "
                                       "now"),
    "data.examples_per_shard": (20000, "it was never read (a shard holds a chunk of "
                                       "data.docs_per_chunk documents)"),
}

# Where a new run's parameters come from (docs/PRETRAINING.md, "Runs in phases").
INIT = {
    "from_run": Key("", "start from another run's parameters: its workdir, checkpoints/ or "
                    "checkpoints/STEP (kjax train --init-from); '': a fresh init"),
    "mode": Key("phase", "with from_run: phase (a new run from the parent's parameters: its "
                "own step counter from 0, schedule, warmup and data iterator) or continue (a "
                "decay branch, kjax train --decay-from: the parent's whole state — step "
                "counter, optimizer, EMA, data position and per-source counters — continued "
                "with this config's schedule; kjax/pretrain/branch.py)",
                choices=("phase", "continue")),
    "optimizer": Key("fresh", "a phase (init.mode=phase): fresh (a new optimizer state) or "
                     "keep (the parent's moments, same optimizer and shapes); the schedule is "
                     "the phase's, from step 0, either way (a decay branch keeps the parent's)",
                     choices=("fresh", "keep")),
    "new_positions": Key("init", "rows a longer position table gains over the parent's: init "
                         "(freshly initialised) or copy (the parent's rows repeated, as "
                         "KoBigBird grew BERT's)", choices=("init", "copy")),
    "weights": Key("params", "a phase: which of the parent's weights to start from, "
                   "params or ema (their moving average: a parent with train.ema_decay > 0)",
                   choices=("params", "ema")),
}

SCHEMA = {
    "name": Key("kjax", "the run's name (model card, logs)"),
    "model": MODEL, "shake": SHAKE, "knowledge": KNOWLEDGE, "tokenizer": TOKENIZER,
    "data": DATA, "train": TRAIN, "mesh": MESH, "init": INIT, "finetune": FINETUNE,
    "phases": Key((), "phases of one run, in order: ({'name': 'seq128', 'overrides': "
                  "{'train.num_steps': 900000}}, ...); kjax train runs each in "
                  "WORKDIR/phases/NAME from the last checkpoint of the one before"),
}


def leaves(tree: dict = SCHEMA, prefix: str = "") -> dict[str, Key]:
    """{"model.hidden_size": Key, ...} in schema order."""
    out = {}
    for name, node in tree.items():
        if isinstance(node, Key):
            out[prefix + name] = node
        else:
            out.update(leaves(node, f"{prefix}{name}."))
    return out
