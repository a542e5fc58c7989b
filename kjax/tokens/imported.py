"""`imported`: the tokenizer a transformers model folder came with, run by the
`tokenizers` library (`kjax import --hf DIR` copies it as `tokenizer.json`
into the workdir; `tokenizer.path` names that file).

The ids are exactly the folder's (`Tokenizer.encode(text,
add_special_tokens=False)`), so an imported model reads what it was trained
on. The per-token arrays (kjax/tokens/sentencepiece.py) come from the
character offsets tokenizers reports: a token starts a new eojeol when
whitespace lies between it and the previous token; `morph` is the eojeol
(no morphemes), `inpos` the index inside it, `tag` 0 (no POS). That is why
input modes that need morphemes or POS pairs refuse this scheme.

Special tokens keep the vocabulary's own ids (BERT's [CLS] is 101, not
kjax's 2): `special_ids` names them, found by their usual spellings, and
fine-tuning builds its rows with them.
"""
from __future__ import annotations

import json

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.text.normalize import normalize

# Each kjax special role, and the spellings a transformers vocabulary uses for it.
SPELLINGS = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"),
             "cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}


class ImportedTokenizer:
    scheme = "imported"

    def __init__(self, path: str):
        from tokenizers import Tokenizer
        if not paths.isfile(path):
            raise KjaxError(f"imported tokenizer {path!r} not found; `kjax import --hf DIR` "
                            f"writes it (tokenizer.path names the tokenizer.json it copied)")
        try:
            self.tk = Tokenizer.from_str(paths.read_text(path))
        except Exception as e:   # not a tokenizers JSON file
            raise KjaxError(f"{path}: not a tokenizers tokenizer.json ({e})") from None
        self.path = path
        vocab = self.tk.get_vocab(with_added_tokens=True)
        self.special_ids = {}
        for role, names in SPELLINGS.items():
            found = [vocab[n] for n in names if n in vocab]
            if not found:
                raise KjaxError(f"{path}: the vocabulary has no {role} token ({' or '.join(names)}); "
                                f"kjax fine-tuning needs [CLS]/[SEP]-style specials")
            self.special_ids[role] = found[0]

    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size(with_added_tokens=True)

    def id_to_token(self, i: int) -> str:
        return self.tk.id_to_token(int(i)) or ""

    def token_to_id(self, token: str) -> int:
        i = self.tk.token_to_id(token)
        return self.special_ids["unk"] if i is None else i

    def encode_with_spans(self, sentence: str) -> tuple[dict, list[tuple[int, int]]]:
        """(the per-token arrays of `sentence`, each token's character span in
        it). `sentence` is read as given: callers normalise first."""
        enc = self.tk.encode(sentence, add_special_tokens=False)
        ids = np.asarray(enc.ids, np.int32)
        spans = [(int(s), int(e)) for s, e in enc.offsets]
        starts = np.zeros(len(ids), bool)
        for k, (s, _) in enumerate(spans):   # whitespace before it: a new eojeol
            gap = sentence[spans[k - 1][1]:s] if k else " "
            starts[k] = any(c.isspace() for c in gap)
        eojeol = np.cumsum(starts).astype(np.int32) - 1
        first = np.maximum.accumulate(np.where(starts, np.arange(len(ids)), 0))
        inpos = (np.arange(len(ids)) - first).astype(np.int32)
        arrays = {"ids": ids, "morph": eojeol.copy(), "inpos": inpos,
                  "tag": np.zeros_like(ids), "eojeol": eojeol}
        return arrays, spans

    def encode(self, sentence: str) -> dict[str, np.ndarray]:
        # kjax's one normalisation (NFC, odd spaces): a no-op on ordinary text,
        # so the ids are the folder tokenizer's own on what kjax reads.
        return self.encode_with_spans(normalize(sentence))[0]

    def decode(self, ids) -> str:
        return self.tk.decode([int(i) for i in ids])


def tokenizer_json_from_folder(hf_dir: str) -> str | None:
    """The folder's tokenizer as tokenizers JSON text: its tokenizer.json, or
    a WordPiece tokenizer built from vocab.txt with the settings of its
    tokenizer_config.json (lower-casing, accents, CJK splitting), as
    transformers' BertTokenizerFast builds it. None: the folder has neither."""
    import os
    file = os.path.join(hf_dir, "tokenizer.json")
    if os.path.isfile(file):
        with open(file, encoding="utf-8") as f:
            return f.read()
    vocab = os.path.join(hf_dir, "vocab.txt")
    if not os.path.isfile(vocab):
        return None
    settings = {}
    config = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            settings = json.load(f)
    from tokenizers import BertWordPieceTokenizer
    lower = bool(settings.get("do_lower_case", True))
    tk = BertWordPieceTokenizer(
        vocab, lowercase=lower, strip_accents=settings.get("strip_accents"),
        handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
        unk_token=settings.get("unk_token", "[UNK]"), sep_token=settings.get("sep_token", "[SEP]"),
        cls_token=settings.get("cls_token", "[CLS]"), pad_token=settings.get("pad_token", "[PAD]"),
        mask_token=settings.get("mask_token", "[MASK]"))
    return tk.to_str()


def single_segment(text: str) -> str:
    """tokenizers JSON whose post-processor gives a pair's second sentence
    token type 0, for a model with one token-type row (RoBERTa, KLUE-RoBERTa
    whose vocab.txt tokenizer is BERT's): transformers' RoBERTa tokenizer
    returns all-0 types, and a type 1 would index past the exported model's
    one-row table. BERT's processor becomes the same template with type 0."""
    tree = json.loads(text)

    def zero(proc):
        if not isinstance(proc, dict):
            return proc
        if proc.get("type") == "BertProcessing":
            (sep, sep_id), (cls, cls_id) = proc["sep"], proc["cls"]
            special = lambda tok: {"SpecialToken": {"id": tok, "type_id": 0}}  # noqa: E731
            seq = lambda name: {"Sequence": {"id": name, "type_id": 0}}  # noqa: E731
            proc = {"type": "TemplateProcessing",
                    "single": [special(cls), seq("A"), special(sep)],
                    "pair": [special(cls), seq("A"), special(sep), seq("B"), special(sep)],
                    "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]}
                                       for t, i in ((cls, cls_id), (sep, sep_id))}}
        if proc.get("type") == "TemplateProcessing":
            for piece in proc["single"] + proc["pair"]:
                next(iter(piece.values()))["type_id"] = 0
        if proc.get("type") == "Sequence":
            proc["processors"] = [zero(p) for p in proc["processors"]]
        return proc

    tree["post_processor"] = zero(tree.get("post_processor"))
    return json.dumps(tree, ensure_ascii=False)
