"""What `make tpu-check` and `make gpu-check` compile: one list of cases
each, read by the checks (.ci/tpu_check.py, .ci/gpu_check.py) and by the
tables written from the record (figures.py), in this order."""
from __future__ import annotations

from compile_checks.record import case_id
from compile_checks.targets import h100_topology

SHAKE_DENSE = ["model.shake_factor=0.3", "shake.variant=random", "shake.layout=dense"]
FLASH_PAIRS = ["model.shake_factor=0.3", "shake.variant=random", "shake.layout=pairs",
               "model.attention_impl=flash", "model.attention_dropout_rate=0.0"]
PACKING = ["train.packing=true"]
HUGE_BATCH = ["train.batch_size=1048576"]
# bert_base's batch 256 (BERT's at 512 tokens) in two microbatches of v3_8.py's 128
ACCUMULATED = ["train.batch_size=256", "train.microbatches=2"]
MODELS = ["demo", "bert_s", "bert_b", "bert_base", "bert_large", "roberta_base", "mbert_s",
          "mbert_b", "mbert_m", "uknow_small", "uknowbert_s", "uknowbert_b", "uknowbert_r",
          "uknowbert_w", "roberta_small_shake", "shake_baseline", "shake_pos_plus",
          "shake_pos_minus", "shake_random", "shake_shared_position", "shake_merged",
          "modern_small", "modern_base", "modern_2026", "electra_small", "electra_base"]
# (preset, topology, overrides, what the case adds, whether XLA must accept it):
# the slice presets on their slices, every model preset on a v3-8 (the
# smallest slice the thesis used) but bert_large_lamb (on the v3-32 its batch
# of 64k is for), and what changes the program on small models
TPU_CASES = [("v3_8", "v3-8", [], "", True), ("v2_8", "v2-8", [], "", True),
             ("v3_32", "v3-32", [], "4 hosts", True), ("v4_8", "v4-8", [], "", True),
             ("demo", "v3-128", ["train.batch_size=256"], "16 hosts", True),
             ("demo", "v3-8", HUGE_BATCH, "batch 2^20: refused", False),
             ("bert_base", "v3-8", ["train.batch_size=512"], "batch 512, no remat: refused",
              False),
             ("bert_base", "v3-8", ACCUMULATED, "batch 256 in 2 microbatches, no remat", True),
             ("bert_large_lamb", "v3-32", [], "4 hosts", True),
             ("bert_s", "v3-8", SHAKE_DENSE, "shaking, dense B", True),
             # the kernel itself, traced for TPU (Mosaic): bf16 products on a v4, and on a
             # v3, whose Mosaic refuses bf16 matmul operands (E2001, "Unsupported matmul
             # RHS type"), the same products of operands widened to fp32
             ("bert_s", "v4-8", FLASH_PAIRS, "flash kernel, pairs B", True),
             ("bert_base", "v4-8", FLASH_PAIRS[:-1] + ["model.attention_dropout_rate=0.1"],
              "flash kernel, attention dropout 0.1 in it, pairs B", True),
             ("bert_base", "v3-8", ["model.attention_impl=flash"],
              "flash kernel on a v3 (fp32 operands), attention dropout 0.1 in it", True),
             ("modern_small", "v3-8", PACKING, "packing", True),
             # the presets that list their phases: each phase as it trains
             ("bert_base_phases", "v3-8", [], "phase 1: 128 tokens, batch 256", True),
             ("bert_base_phases", "v3-8", ["phase=seq512"],
              "phase 2: 512 tokens, batch 256 in 2 microbatches", True),
             ("modern_base", "v3-8", ["phase=extend8192"], "phase 2: 8192 tokens, batch 32",
              True),
             # the 2026 recipe: each batch-ramp stage and phase that compiles its own program
             ("modern_2026", "v3-8", ["phase=stable1024", "train.batch_ramp=()",
                                      "train.batch_size=64"], "ramp stage 1: batch 64", True),
             ("modern_2026", "v3-8", ["phase=stable1024", "train.batch_ramp=()",
                                      "train.batch_size=128"], "ramp stage 2: batch 128", True),
             ("modern_2026", "v3-8", ["phase=extend8192"],
              "phase 2: 8192 tokens, batch 32 in 2 microbatches", True),
             ("modern_2026", "v3-8", ["phase=decay8192"], "phase 3: the 1 − √ decay, EMA",
              True)] + \
    [(m, "v3-8", [], "", True) for m in MODELS]

# (preset, overrides, what the case is[, GPUs]): one H100 (or a node of them),
# the batches of docs/GPU.md's runs (uknowbert_b: its 256 positions at
# bert_base's tokens per step)
GPU_CASES = [("bert_base", ["train.batch_size=32"], "512×32"),
             ("modern_base", ["train.batch_size=16"], "1024×16"),
             ("uknowbert_b", ["train.batch_size=64"], "256×64"),
             # the Pallas kernel through Triton, attention dropout and pairs B in it: a
             # kernel Triton refuses, or one that spills registers, fails here and not
             # on a user's GPU
             ("bert_base", ["train.batch_size=32", "model.shake_factor=0.3",
                            "shake.variant=random", "shake.layout=pairs",
                            "model.attention_impl=flash"], "512×32, flash: dropout + pairs B"),
             # an 8-GPU node, batch 256 in 2 microbatches: one gradient reduction a step
             ("bert_base", ["train.batch_size=256", "train.microbatches=2"],
              "512×256 on 8 GPUs, 2 microbatches", 8)]


def case_config(preset_file: str, overrides):
    """The config a case compiles: the preset with its overrides, and for a
    `phase=NAME` override that phase of a preset that lists its phases, loaded
    as `kjax compile` loads it (kjax/pretrain/run_load.py)."""
    from kjax.pretrain.run_load import load_run
    phase = next((o.split("=", 1)[1] for o in overrides if o.startswith("phase=")), None)
    return load_run(preset_file, [f"--config.{o}" for o in overrides
                                  if not o.startswith("phase=")], phase=phase,
                    use="target").config


def tpu_case_id(case) -> str:
    return case_id("tpu", case[0], case[1], case[2])


def gpu_case_id(case) -> str:
    return case_id("gpu", case[0], h100_topology(gpus(case)), case[1])


def gpus(case) -> int:
    """The H100s a GPU case compiles for (1 unless it names more)."""
    return case[3] if len(case) > 3 else 1


def header_case(preset: str, cases=TPU_CASES):
    """The case a preset's header quotes: the preset alone on its slice (None: none)."""
    return next((case for case in cases if case[0] == preset and not case[2]), None)
