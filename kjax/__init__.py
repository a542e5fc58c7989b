"""kjax: pretraining Korean BERT-family encoders with JAX/Flax.

Folders follow the data's path; a module imports only its own layer or lower
ones (tests/test_architecture.py enforces it; docs/ARCHITECTURE.md explains):

     0 base        errors, paths (the file layer), progress, config (tree, schema, checks, loading)
     1 text        corpus reading
     2 morph       Kiwi morphemes
     3 tokens      tokenizers, tokenizer statistics
     4 knowledge   lexical resources, knowledge targets, coverage
     5 shake       B of Eq. 1, shared and merged positions
     6 examples    NSP pairs, masking, ArrayRecord shards
     7 inputs      the input-mode registry (one module per mode)
     8 batches     the grain loader
     9 model       the encoder and its heads
    10 objectives  loss numerics (losses/) and the objective registry (objectives/)
    11 parallel    mesh, logical-axis rules
    12 train       optimizer, state, pure steps, metrics
    13 checkpoint  orbax, verification, fallback
    14 pretrain    `kjax prepare` and the train/eval loop
    15 tools       finetune, export, analysis (siblings apart)
    16 cli         every verb
"""
import os as _os
import sys as _sys

__version__ = "0.5.1"

# One way to reach gs:// (docs/TPU.md, "Paths"): etils.epath, which orbax uses
# for checkpoint folders, would send gs:// to tf.io.gfile whenever tensorflow
# is installed (the [tfds] extra pulls it in); kjax's own files go through
# fsspec/gcsfs (kjax/paths.py). Forcing epath onto gcsfs too gives one client,
# one credential chain (Application Default Credentials) and one code path
# that the tests exercise against a GCS emulator. Set before epath decides;
# if something imported and used it already, drop its cached decision.
_os.environ["EPATH_USE_TF"] = "false"
if "etils.epath.gpath" in _sys.modules:
    _cached = getattr(_sys.modules["etils.epath.gpath"], "_is_tf_installed", None)
    if hasattr(_cached, "cache_clear"):
        _cached.cache_clear()

# gs:// requests ride out an object-store outage (kjax/store_outage.py): fsspec's
# `gs` implementation becomes gcsfs with kjax's retries, for kjax's own files and
# orbax's (through epath) alike. Nothing is imported until gs:// is used.
from kjax import store_outage as _store_outage  # noqa: E402
_store_outage.register()
