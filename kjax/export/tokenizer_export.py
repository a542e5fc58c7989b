"""kjax tokenizers as transformers tokenizers, with kjax's ids.

- `sentencepiece`: a `tokenizer.json` for transformers' fast backend, built
  from the .model file (pieces, scores, kjax's special ids) — no custom code.
  It applies kjax's one normalisation (kjax/text/normalize.py: NFC, every
  other whitespace or control character — tab, CR, LF, U+3000, U+00A0 — → " ")
  and then sentencepiece's own (identity rule): runs of spaces collapsed,
  trailing spaces and ▁ dropped, a dummy ▁ in front. Unigram and BPE models are both supported.
- `morph-sp`, `multihot`: Kiwi analysis comes first, which no tokenizer.json
  can express, so these ship Python tokenizer classes (below) that call kjax's
  own tokenizers; load them with `KjaxMorphSPTokenizer.from_pretrained(DIR)`
  or `AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)`.

All produce `[CLS] A [SEP] B [SEP]` with token types 0…0 1…1, as kjax's
examples do. Known divergences (docs/EXPORT.md): text that *starts* with a
literal special token, and literal "[PAD]"/"[UNK]" strings in text.
"""
from __future__ import annotations

import json
import os
import shutil

from kjax import paths
from kjax.errors import KjaxError
from kjax.text.normalize import normalize, odd_whitespace
from kjax.tokens.sentencepiece import CLS, SEP, SPECIAL_TOKENS, WORD_START

SPECIAL_KWARGS = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                      sep_token="[SEP]", mask_token="[MASK]")
MODEL_INPUTS = ["input_ids", "token_type_ids", "attention_mask"]
REMOTE_CODE_FILE = "tokenization_kjax.py"


# ---- sentencepiece .model → tokenizer.json ------------------------------
def _fields(buf: bytes):
    """(field number, value) pairs of one protobuf message (wire format)."""
    pos = 0

    def varint():
        nonlocal pos
        shift = result = 0
        while True:
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return result

    while pos < len(buf):
        tag = varint()
        wire = tag & 7
        if wire == 0:
            yield tag >> 3, varint()
        elif wire == 2:
            n = varint()
            yield tag >> 3, buf[pos:pos + n]
            pos += n
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def sentencepiece_settings(model_file: str) -> dict:
    """The trainer/normalizer settings the fast tokenizer must reproduce, read
    from the model proto directly (sentencepiece's Python API hides them and
    its bundled protobuf module depends on the installed protobuf version)."""
    with open(model_file, "rb") as f:
        proto = f.read()
    spec = {"model_type": 1, "byte_fallback": False, "name": "", "charsmap": b"",
            "add_dummy_prefix": True, "remove_extra_whitespaces": True,
            "escape_whitespaces": True}
    try:
        for number, value in _fields(proto):
            if number == 2:    # TrainerSpec
                for n, v in _fields(value):
                    if n == 3:
                        spec["model_type"] = v
                    elif n == 35:
                        spec["byte_fallback"] = bool(v)
            elif number == 3:  # NormalizerSpec
                for n, v in _fields(value):
                    key = {1: "name", 2: "charsmap", 3: "add_dummy_prefix",
                           4: "remove_extra_whitespaces", 5: "escape_whitespaces"}.get(n)
                    if key:
                        spec[key] = v.decode() if n == 1 else (v if n == 2 else bool(v))
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise KjaxError(f"{model_file} is not a sentencepiece model ({e}); pass the "
                        f"tokenizer.path(.model) that `kjax tokenizer train` wrote") from None
    return spec


def _check_supported(model_file: str, spec: dict) -> None:
    problems = []
    if spec["model_type"] not in (1, 2):
        problems.append("model_type must be unigram or bpe")
    if spec["charsmap"] or spec["name"] not in ("identity", ""):
        problems.append(f"normalization rule {spec['name']!r} (kjax trains with 'identity')")
    if spec["byte_fallback"]:
        problems.append("byte_fallback")
    if not (spec["remove_extra_whitespaces"] and spec["escape_whitespaces"]):
        problems.append("remove_extra_whitespaces/escape_whitespaces off")
    if problems:
        raise KjaxError(f"{model_file}: cannot be reproduced exactly by a fast tokenizer "
                        f"({'; '.join(problems)}); retrain it with `kjax tokenizer train`")


def _bpe_merges(pieces: list[str], first_regular: int) -> list[tuple[str, str]]:
    """sentencepiece BPE merges by the rank of the merged piece (its id), the
    order in which sentencepiece itself applies them."""
    index = {p: i for i, p in enumerate(pieces) if i >= first_regular}
    merges = []
    for i, piece in enumerate(pieces[first_regular:], first_regular):
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in index and right in index:
                merges.append((i, index[left], index[right], left, right))
    return [(left, right) for *_, left, right in sorted(merges)]


def build_fast_tokenizer(model_file: str):
    """tokenizers.Tokenizer equal to kjax's SentencePieceTokenizer (see module doc)."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors
    spec = sentencepiece_settings(model_file)
    _check_supported(model_file, spec)
    sp = spm.SentencePieceProcessor(model_file=model_file)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if tuple(pieces[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise KjaxError(f"{model_file}: ids 0..4 are {pieces[:5]}, not {list(SPECIAL_TOKENS)}; "
                        f"retrain it with `kjax tokenizer train`")
    if spec["model_type"] == 1:
        model = models.Unigram([(p, sp.get_score(i)) for i, p in enumerate(pieces)],
                               unk_id=SPECIAL_TOKENS.index("[UNK]"), byte_fallback=False)
    else:
        model = models.BPE(vocab={p: i for i, p in enumerate(pieces)},
                           merges=_bpe_merges(pieces, len(SPECIAL_TOKENS)),
                           unk_token="[UNK]", fuse_unk=True, byte_fallback=False)
    tok = Tokenizer(model)
    odd = "".join(f"\\x{{{ord(c):x}}}" for c in odd_whitespace())
    steps = [normalizers.NFC(),                                # kjax/text/normalize.py
             normalizers.Replace(Regex(f"[{odd}]"), " "),       # ... its odd whitespace
             normalizers.Replace(Regex(" {2,}"), " "),          # sp: collapse spaces
             normalizers.Replace(Regex(f"[ {WORD_START}]+\\z"), "")]  # sp: trailing ▁ go
    if spec["add_dummy_prefix"]:
        # A leading literal ▁ still gets sp's dummy ▁ in front of it (Metaspace
        # would skip the prefix). \A/\z, not ^/$: those match at every line break.
        steps.append(normalizers.Replace(Regex(f"\\A{WORD_START}"), " " + WORD_START))
    tok.normalizer = normalizers.Sequence(steps)
    scheme = "first" if spec["add_dummy_prefix"] else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(WORD_START, prepend_scheme=scheme, split=False)
    tok.decoder = decoders.Metaspace(WORD_START, prepend_scheme=scheme, split=False)
    # normalized=True: special tokens are found after normalisation, so the
    # spaces around them become ▁ pieces as in sentencepiece.
    tok.add_special_tokens([AddedToken(t, normalized=True, special=True) for t in SPECIAL_TOKENS])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)])
    return tok


def export_sentencepiece(model_file: str, out_dir: str, model_max_length: int):
    """Writes tokenizer.json + tokenizer_config.json; returns the loaded tokenizer."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    specials = {k: AddedToken(v, normalized=True, special=True) for k, v in SPECIAL_KWARGS.items()}
    fast = PreTrainedTokenizerFast(tokenizer_object=build_fast_tokenizer(model_file),
                                   model_input_names=MODEL_INPUTS,
                                   model_max_length=model_max_length, **specials)
    fast.save_pretrained(out_dir)
    return fast


def kjax_reference_ids(tokenizer, text: str) -> list[int]:
    """What kjax's data path gives a text: kjax/text/normalize.py (the corpus
    reader and every tokenizer apply it) + encode."""
    return [int(i) for i in tokenizer.encode(normalize(text))["ids"]]


# ---- Kiwi schemes: Python tokenizer classes ------------------------------
def _python_backend():
    from transformers import PreTrainedTokenizer
    return PreTrainedTokenizer


class _KiwiTokenizer(_python_backend()):
    """transformers tokenizer around a kjax Kiwi tokenizer (ids are kjax's by
    construction). Special-token strings in the text are kept whole; the text
    between them is analysed by Kiwi."""
    model_input_names = MODEL_INPUTS

    def __init__(self, vocab_file: str, **kwargs):
        self.vocab_file = vocab_file
        self.kjax = self.open_kjax(vocab_file)
        for key, value in SPECIAL_KWARGS.items():
            kwargs.setdefault(key, value)
        kwargs.setdefault("special_tokens_pattern", "cls_sep")
        kwargs.setdefault("token_type_ids_pattern", "bert_style")
        super().__init__(**kwargs)

    @staticmethod
    def open_kjax(vocab_file: str):
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return self.kjax.vocab_size

    def get_vocab(self) -> dict[str, int]:
        vocab = {self.kjax.id_to_token(i): i for i in range(self.kjax.vocab_size)}
        vocab.update(self._added_tokens_encoder)
        return vocab

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [self.kjax.id_to_token(i) for i in self.kjax.encode(text)["ids"]]

    def _convert_token_to_id(self, token: str) -> int:
        return int(self.kjax.token_to_id(token))

    def _convert_id_to_token(self, index: int) -> str:
        return self.kjax.id_to_token(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self.kjax.decode([self._convert_token_to_id(t) for t in tokens])

    def encode_arrays(self, text: str) -> dict:
        """kjax's per-token arrays (ids, morph, inpos, tag, eojeol) of one text."""
        return self.kjax.encode(text)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None):
        name = (f"{filename_prefix}-" if filename_prefix else "") + \
            self.vocab_files_names["vocab_file"]
        target = os.path.join(save_directory, name)
        written = []
        for suffix in ("", ".json"):  # multihot keeps its settings beside the list
            if os.path.isfile(self.vocab_file + suffix):
                if os.path.abspath(self.vocab_file + suffix) != os.path.abspath(target + suffix):
                    shutil.copyfile(self.vocab_file + suffix, target + suffix)
                written.append(target + suffix)
        return tuple(written)


class KjaxMorphSPTokenizer(_KiwiTokenizer):
    """`morph-sp`: Kiwi morphemes, then sentencepiece per morpheme."""
    vocab_files_names = {"vocab_file": "kjax_morph_sp.model"}

    @staticmethod
    def open_kjax(vocab_file: str):
        from kjax.tokens.morph_sp import MorphSPTokenizer
        return MorphSPTokenizer(vocab_file)


class KjaxMultihotTokenizer(_KiwiTokenizer):
    """`multihot`: UKnowBERT's morpheme token sets, flattened one token per id
    (`encode_arrays` gives the morpheme index and in-morpheme position too)."""
    vocab_files_names = {"vocab_file": "kjax_multihot.txt"}

    @staticmethod
    def open_kjax(vocab_file: str):
        from kjax.tokens.multihot import MultihotTokenizer
        return MultihotTokenizer(vocab_file)

    def multihot_inputs(self, text, text_pair=None, max_length: int | None = None,
                        return_tensors: str | None = None) -> dict:
        """Inputs of the exported multi-hot model (torch_multihot.py) for a text or
        a batch, built by kjax's own batch code (`assemble`, `to_multihot`):
        `input_ids` the flat token stream, `token_position`/`token_inpos` per token,
        `position_tags`/`token_type_ids`/`attention_mask` per morpheme position;
        both axes padded to the longest example (or `max_length`)."""
        import numpy as np
        from kjax.inputs.segments import to_multihot
        from kjax.examples.pairs import assemble
        from kjax.tokens.sentencepiece import TOKEN_ARRAYS
        texts = [text] if isinstance(text, str) else list(text)
        pairs = [text_pair] if isinstance(text_pair, str) else \
            list(text_pair or [None] * len(texts))
        encode = lambda t: self.kjax.encode(normalize(t))  # noqa: E731
        empty = {k: np.zeros(0, np.int32) for k in TOKEN_ARRAYS}
        examples = []
        for a, b in zip(texts, pairs, strict=True):
            ex = assemble(encode(a), empty if b is None else encode(b), 0, (0, 0))
            if b is None:   # [CLS] A [SEP]: assemble always closes a B
                ex = {k: v[:-1] if v.ndim else v for k, v in ex.items()}
            examples.append(ex)
        longest = max(len(ex["input_ids"]) for ex in examples)
        length = max_length or longest
        if longest > length:
            raise KjaxError(f"an example has {longest} tokens but max_length={length}; "
                            f"shorten the text or raise max_length")
        rows = [to_multihot(ex, ex["input_ids"], np.zeros(0, np.int64), length, 1, 1)
                for ex in examples]
        keys = {"input_ids": "token_ids", "token_position": "token_position",
                "token_inpos": "token_inpos", "position_tags": "position_tags",
                "token_type_ids": "token_type_ids", "attention_mask": "attention_mask"}
        out = {k: np.stack([r[v] for r in rows]).astype(np.int64) for k, v in keys.items()}
        if return_tensors == "pt":
            import torch
            return {k: torch.from_numpy(v) for k, v in out.items()}
        return out


def export_kiwi(cls, vocab_file: str, out_dir: str, model_max_length: int):
    """Saves the tokenizer class's files, plus a one-line module and auto_map so
    AutoTokenizer can load it with trust_remote_code=True (kjax installed)."""
    tok = cls(vocab_file, model_max_length=model_max_length)
    tok.save_pretrained(out_dir)
    with open(os.path.join(out_dir, REMOTE_CODE_FILE), "w", encoding="utf-8") as f:
        f.write('"""Loads kjax\'s tokenizer classes (needs `pip install kjax[torch]`)."""\n'
                f"from kjax.export.tokenizer_export import {cls.__name__}  # noqa: F401\n")
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        tokenizer_config = json.load(f)
    module = REMOTE_CODE_FILE.removesuffix(".py")
    tokenizer_config["auto_map"] = {"AutoTokenizer": [f"{module}.{cls.__name__}", None]}
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f, ensure_ascii=False, indent=2)
    return tok


def export_imported(path: str, out_dir: str, limit: int) -> None:
    """An imported vocabulary (kjax import) back as the fast tokenizer it came
    from: its tokenizer.json (post-processor included) and its specials."""
    from transformers import PreTrainedTokenizerFast
    from kjax.tokens.imported import ImportedTokenizer
    tok = ImportedTokenizer(path)
    names = {f"{role}_token": tok.id_to_token(i) for role, i in tok.special_ids.items()}
    PreTrainedTokenizerFast(tokenizer_object=tok.tk, model_max_length=limit,
                            **names).save_pretrained(out_dir)


def export_tokenizer(config, out_dir: str, shown_as: str | None = None) -> dict:
    """The configured scheme's tokenizer into `out_dir`; returns what the
    model card and kjax_export.json say about it (naming the folder
    `shown_as` when it is written elsewhere first)."""
    from kjax.tokens.factory import check_scheme, tokenizer_file
    scheme = config.tokenizer.scheme
    check_scheme(scheme)
    path = tokenizer_file(config)
    if not paths.isfile(path):
        raise KjaxError(f"tokenizer {path!r} (tokenizer.path) not found; pass the config the "
                        f"model was trained with, or run `kjax tokenizer train` for it")
    limit = config.model.max_position_embeddings
    if scheme == "imported":
        export_imported(path, out_dir, limit)
        return {"scheme": scheme, "class": "PreTrainedTokenizerFast (tokenizer.json)",
                "usage": f"tokenizer = AutoTokenizer.from_pretrained({shown_as or out_dir!r})"}
    if scheme == "sentencepiece":
        export_sentencepiece(path, out_dir, limit)
        return {"scheme": scheme, "class": "PreTrainedTokenizerFast (tokenizer.json)",
                "usage": f"tokenizer = AutoTokenizer.from_pretrained({shown_as or out_dir!r})"}
    cls = KjaxMorphSPTokenizer if scheme == "morph-sp" else KjaxMultihotTokenizer
    export_kiwi(cls, path, out_dir, limit)
    return {"scheme": scheme, "class": f"kjax.export.tokenizer_export.{cls.__name__}",
            "usage": f"from kjax.export.tokenizer_export import {cls.__name__}\n"
                     f"tokenizer = {cls.__name__}.from_pretrained({shown_as or out_dir!r})"}
