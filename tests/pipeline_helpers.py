"""Shared by the Korean text pipeline tests: a small real Korean corpus (the
constitution shipped inside KoNLPy's wheel, offline) and a trained tokenizer
of each scheme on it."""
import glob
import os

from conftest import tiny_config
from kjax.config import apply_override
from kjax.tokens.factory import open_tokenizer, train_tokenizer

SCHEMES = ("sentencepiece", "morph-sp", "multihot")
# Per scheme: vocabulary sizes that this ~18k-character corpus supports.
VOCAB = {"sentencepiece": 700, "morph-sp": 500, "multihot": 400}


def constitution_lines() -> list[str]:
    import konlpy
    path = os.path.join(os.path.dirname(konlpy.__file__), "data", "corpus", "kolaw")
    (constitution,) = glob.glob(os.path.join(path, "constitution.txt"))
    with open(constitution, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def write_corpus(path, lines_per_doc: int = 6, extra: bytes = b"") -> str:
    """The constitution as documents of `lines_per_doc` lines, then `extra`."""
    lines = constitution_lines()
    docs = [lines[i:i + lines_per_doc] for i in range(0, len(lines), lines_per_doc)]
    with open(path, "wb") as f:
        f.write("\n\n".join("\n".join(d) for d in docs).encode("utf-8") + b"\n\n" + extra)
    return str(path)


def scheme_config(tmp, scheme: str, corpus: str, **extra):
    """A tiny config for `scheme` with its tokenizer trained on `corpus`;
    model.vocab_size is set to the trained size (multihot's is known only then)."""
    config = tiny_config(tmp, **{
        "tokenizer.scheme": f"{scheme}", "tokenizer.vocab_size": VOCAB[scheme],
        "tokenizer.min_syllable_count": 2, "model.vocab_size": VOCAB[scheme],
        "data.corpus": f"{corpus}", "data.document_per_file": False,
        "data.docs_per_chunk": 16, "data.eval_every_nth_doc": 5,
        "data.mask_unit": "morpheme" if scheme == "multihot" else "eojeol", **extra})
    train_tokenizer(config)
    apply_override(config, f"--config.model.vocab_size={open_tokenizer(config).vocab_size}")
    return config


def with_overrides(config, **values):
    """A copy of `config` with `--config.KEY=VALUE` overrides applied."""
    copy = config.copy_and_resolve_references()
    for key, value in values.items():
        apply_override(copy, f"--config.{key}={value}")
    return copy
