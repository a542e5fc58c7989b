"""Fill-mask for models whose positions are morphemes (model.input_mode=
'multihot', UKnowBERT, METHODS §2.3–2.4), and `open_filler`, which picks the
fill-mask a run's input mode needs.

How a text becomes the model's input, as training makes it: the text between
[MASK]s is analysed by the run's tokenizer (Kiwi, X+하/되 joined) into
morphemes, each morpheme's tokens (§2.2) summed into one position (Eq. 3);
a [MASK] is one morpheme position fed as one [MASK] token, as the loader
feeds a masked morpheme (kjax/inputs/segments.py).

What training shows that a user's text cannot: a masked morpheme keeps its
POS tag (E_postag, Eq. 4) — the loader masks tokens, not tags. Fill-mask
does not know the tag, so every [MASK] is scored under each word-class tag
(substantives, predicates, modifiers, particles, endings, affixes: TAG_SET)
and the answers are the mixture with equal weight per tag:

    P(form) = 1/|T| · Σ_t Σ_{v : §2.2 encodes (form, t) as the one token v} P(v | text, t)

so an answer is a morpheme (form, tag) the vocabulary writes as one token
(`##를` = 를/JKO, `학교` = 학교/NNG); its probability sums over the tags that
spell it that way. The head is trained towards 1/n on each of the n tokens
of a morpheme (Eq. 7–9): a morpheme the vocabulary splits (syllables,
`동의 하##`) is not an answer here. An answer whose tag is a particle,
ending, suffix or the copula continues the word before it (shown glued in
the filled text), any other starts a word.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kjax.analysis.fill_mask import MASK_TEXT, Answer, FillMask, fill_text
from kjax.config.load import copy_of
from kjax.errors import KjaxError
from kjax.examples.pairs import assemble
from kjax.inputs import input_mode
from kjax.inputs.segments import SEGMENT_KEYS, to_multihot
from kjax.model.layers import gelu
from kjax.morph.tags import TAGS, base_tag
from kjax.tokens.multihot import token_surface
from kjax.tokens.sentencepiece import MASK, NUM_SPECIAL, TOKEN_ARRAYS

# The word-class tags a [MASK] is scored under (Kiwi's N*, V*, M*, IC, J*, E*, X*).
TAG_SET = tuple(i for i, t in enumerate(TAGS) if t[:1] in ("N", "V", "M", "J", "E", "X")
                or t == "IC")
CONTINUES = ("J", "E", "XS", "VCP")   # glued to the word before: particles, endings, …


def open_filler(config, workdir: str, step: int | None = None, weights: str = "params"):
    """The fill-mask for this run's input mode: one token per position
    (fill_mask.FillMask) or one morpheme per position (MorphemeFillMask), of
    the checkpoint's params or their EMA (`weights`)."""
    mode = input_mode(config)
    if mode.positions_are_morphemes:
        return MorphemeFillMask(config, workdir, step, weights=weights)
    if not mode.positions_are_tokens:
        raise KjaxError(f"kjax fill-mask: model.input_mode={config.model.input_mode!r} puts a "
                        f"substantive and its postposition in one position, so a [MASK] "
                        f"written after a word has no position of its own; fill-mask answers "
                        f"for one-token ('onehot') and morpheme ('multihot') positions")
    return FillMask(config, workdir, step, weights=weights)


def continues_word(tag: str) -> bool:
    return base_tag(tag).startswith(CONTINUES)


class MorphemeFillMask:
    """A multi-hot checkpoint's MLM head over texts with [MASK]s (float32, no
    dropout): `predict` as fill_mask.FillMask's, answers are morphemes."""

    note = ("a [MASK] is one morpheme; answers are morphemes the vocabulary writes as one token, "
            "scored under every word-class tag (kjax/analysis/fill_mask_morphemes.py)")

    def __init__(self, config, workdir: str, step: int | None = None, tokenizer=None,
                 weights: str = "params"):
        from kjax.checkpoint.restore import restore_params
        from kjax.tokens.factory import open_tokenizer
        from kjax.train.state import make_model
        self.tokenizer = tokenizer or open_tokenizer(config)
        if self.tokenizer.scheme != "multihot":
            raise KjaxError(f"a multi-hot model needs tokenizer.scheme='multihot' (this run's "
                            f"is {self.tokenizer.scheme!r})")
        self.params, self.step = restore_params(config, workdir, step, weights)
        c = copy_of(config)
        c.model.dtype = "float32"
        self.seq_len = config.data.max_seq_len
        model = make_model(c, deterministic=True)

        def head(module, multihot, token_type_ids, attention_mask, positions):
            """The MLM head at `positions` (BertForPreTraining.__call__'s, without
            the NSP and knowledge heads, which need inputs fill-mask has not)."""
            hidden, _ = module.encode(None, token_type_ids, attention_mask, multihot=multihot)
            picked = jnp.take_along_axis(hidden, positions[..., None], axis=1)
            h = module.mlm_layer_norm(gelu(module.mlm_transform(picked)))
            return module.embeddings.attend(h) + module.mlm_bias.astype(jnp.float32)

        @jax.jit
        def probabilities(params, multihot, token_type_ids, attention_mask, positions):
            logits = model.apply({"params": params}, multihot, token_type_ids, attention_mask,
                                 positions, method=head)
            return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        self._probabilities = probabilities

    def encode(self, text: str) -> tuple[dict, list[int]]:
        """(the model's multi-hot arrays of one row, the [MASK] positions)."""
        if MASK_TEXT not in text:
            raise KjaxError(f"no [MASK] in {text!r}; write [MASK] where a morpheme is missing, "
                            f"e.g. \"오늘 날씨[MASK] 좋네요\"")
        parts, morphs = [], 0
        for j, chunk in enumerate(text.split(MASK_TEXT)):
            if j:   # the [MASK]: one morpheme of one [MASK] token
                parts.append({"ids": [MASK], "morph": [morphs], "inpos": [0], "tag": [0],
                              "eojeol": [0]})
                morphs += 1
            arrays = self.tokenizer.encode(chunk) if chunk.strip() else None
            if arrays is not None and len(arrays["ids"]):
                parts.append({**arrays, "morph": np.asarray(arrays["morph"]) + morphs})
                morphs = int(parts[-1]["morph"].max()) + 1
        a = {k: np.concatenate([np.asarray(p[k], np.int32) for p in parts]) for k in TOKEN_ARRAYS}
        empty = {k: np.zeros(0, np.int32) for k in TOKEN_ARRAYS}
        ex = assemble(a, empty, 0, (0, 0))
        ex = {k: v[:-1] if v.ndim else v for k, v in ex.items()}   # [CLS] A [SEP]
        if len(ex["input_ids"]) > self.seq_len:
            raise KjaxError(f"{text!r} is {len(ex['input_ids'])} tokens; the model takes "
                            f"{self.seq_len} (data.max_seq_len)")
        row = to_multihot(ex, ex["input_ids"], np.zeros(0, np.int64), self.seq_len, 1, 1)
        owner = row["token_position"]
        return row, sorted({int(owner[i]) for i in np.flatnonzero(row["token_ids"] == MASK)})

    def _morpheme(self, token: int, tag: int) -> str | None:
        """The form whose morpheme (form, TAGS[tag]) §2.2 writes as this one token."""
        form = token_surface(self.tokenizer.id_to_token(token))
        if token < NUM_SPECIAL or not form:
            return None
        encoded = self.tokenizer.vocab.encode_morpheme_ids(form, TAGS[tag])
        return form if encoded == (token,) else None

    @functools.cached_property
    def _pairs(self) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """Every (tag row, token) that is one morpheme, and its answer's index in
        `keys` ((form, starts a word)): the sum of the module doc, as arrays."""
        keys: dict[tuple[str, bool], int] = {}
        rows, tokens, which = [], [], []
        for r, tag in enumerate(TAG_SET):
            starts = not continues_word(TAGS[tag])
            for v in range(NUM_SPECIAL, self.tokenizer.vocab_size):
                form = self._morpheme(v, tag)
                if form is not None:
                    rows.append(r)
                    tokens.append(v)
                    which.append(keys.setdefault((form, starts), len(keys)))
        return list(keys), np.asarray(rows), np.asarray(tokens), np.asarray(which)

    def predict(self, texts: list[str], top_k: int = 5, batch_size: int = 16,
                progress=None) -> list[list[list[Answer]]]:
        """Per text, per [MASK] (in order): the top_k morphemes, likeliest first."""
        results = []
        for text in texts:
            row, masks = self.encode(text)
            n = len(TAG_SET)
            tags = np.repeat(row["position_tags"][None], n, 0)
            for p in masks:
                tags[:, p] = TAG_SET
            multihot = {k: np.repeat(row[k][None], n, 0) for k in SEGMENT_KEYS}
            multihot["position_tags"] = tags
            probs = np.asarray(jax.device_get(self._probabilities(
                self.params, multihot, np.repeat(row["token_type_ids"][None], n, 0),
                np.repeat(row["attention_mask"][None], n, 0),
                np.tile(np.asarray(masks, np.int32), (n, 1)))))       # [tags, masks, V]
            results.append([self._answers(text, j, probs[:, j], top_k)
                            for j in range(len(masks))])
            if progress is not None:
                progress.update(1)
        return results

    def _answers(self, text: str, which: int, probs: np.ndarray, top_k: int) -> list[Answer]:
        """The mixture over tags (module doc) of one [MASK]'s [tags, V] probabilities."""
        keys, rows, tokens, owner = self._pairs
        p = probs[rows, tokens].astype(np.float64) / len(TAG_SET)
        score = np.bincount(owner, weights=p, minlength=len(keys))
        out = []
        for k in np.argsort(-score, kind="stable")[:top_k]:
            form, starts = keys[k]
            best = np.flatnonzero(owner == k)[np.argmax(p[owner == k])]   # its likeliest spelling
            piece = f"{self.tokenizer.id_to_token(int(tokens[best]))}/{TAGS[TAG_SET[rows[best]]]}"
            out.append(Answer(piece, form, starts, float(score[k]),
                              fill_text(text, which, form, starts)))
        return out
