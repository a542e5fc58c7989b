"""kjax: pretraining Korean BERT-family encoders with JAX/Flax."""
import os as _os
import sys as _sys

__version__ = "0.1.0"

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
