"""Fill-mask with a pretraining checkpoint: the MLM head's top-k pieces for
every [MASK] of a text, decoded to readable text — no export needed.

How a text becomes the model's input: the run's tokenizer encodes it as
pretraining did (`[MASK]` is one of its special pieces), between [CLS] and
[SEP]. A [MASK] written after a space stands for the first piece of a new
word; sentencepiece would put its bare word-start piece `▁` before it, which
is dropped, so the [MASK] takes the place of that word's first piece (`▁학교`,
or a bare `▁` when the word starts with a piece of its own). A [MASK] glued to
a word (`학교[MASK]`) continues that word: a particle, an ending, a syllable.
One [MASK] is one piece: a word of three pieces needs three.

How answers read: a piece `▁학교` starts a word (shown with a leading space
in the filled text); `에` continues the one before; the bare `▁` is shown as
WORD_BOUNDARY: the model says a new word begins here without saying which
(its pieces would follow in further positions).

The check set (`--check`): sentences with one [MASK] and their accepted
answers (kjax/analysis/data/everyday_fill_mask.tsv). A hit is an answer
among the top k whose text equals an accepted answer and whose word-start
agrees with the sentence (a space before the [MASK] or not).
"""
from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from kjax.config.load import copy_of
from kjax.errors import KjaxError
from kjax.inputs import InputMode, input_mode
from kjax.tokens.sentencepiece import CLS, MASK, SEP, WORD_START

MASK_TEXT = "[MASK]"
WORD_BOUNDARY = "␣ (word boundary)"
CHECK_SET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                         "everyday_fill_mask.tsv")


@dataclasses.dataclass
class Answer:
    piece: str          # as in the vocabulary
    text: str           # readable: the piece without its word-start mark
    starts_word: bool
    probability: float
    filled: str         # the text with this answer in place of its [MASK]


def check_supported(config, tokenizer) -> None:
    """One line for what fill-mask cannot do (before any checkpoint is read)."""
    if tokenizer.scheme != "sentencepiece":
        raise KjaxError(f"kjax fill-mask works with tokenizer.scheme='sentencepiece' (this run's "
                        f"is {tokenizer.scheme!r}: its tokens are made from morphemes, and a "
                        f"[MASK] in raw text has none); inspect such a model with `kjax export` "
                        f"and the exported tokenizer")
    mode = input_mode(config)
    if not mode.positions_are_tokens:
        raise KjaxError(f"kjax fill-mask predicts one token per position; model.input_mode="
                        f"{config.model.input_mode!r} puts several tokens at a position")
    if type(mode).position_ids is not InputMode.position_ids:
        raise KjaxError(f"kjax fill-mask numbers positions 0..n-1; model.input_mode="
                        f"{config.model.input_mode!r} numbers them from morphemes")


def mask_starts_word(text: str) -> list[bool]:
    """Per [MASK] of `text`: written at the start or after a space (a new word)."""
    parts = text.split(MASK_TEXT)
    return [not parts[0].strip() or parts[0][-1].isspace() if j == 0 else
            bool(parts[j]) and parts[j][-1].isspace() for j in range(len(parts) - 1)]


def encode_masked(tokenizer, text: str, max_len: int) -> tuple[np.ndarray, list[int]]:
    """([CLS] ids [SEP], the positions of its [MASK]s)."""
    if MASK_TEXT not in text:
        raise KjaxError(f"no [MASK] in {text!r}; write [MASK] where the model should fill in, "
                        f"e.g. \"오늘 날씨[MASK] 좋네요\"")
    ids = [int(i) for i in tokenizer.encode(text)["ids"]]
    if ids.count(MASK) != text.count(MASK_TEXT):
        raise KjaxError(f"the tokenizer did not keep {MASK_TEXT} as one token in {text!r}")
    # a bare word-start piece before a [MASK]: the [MASK] takes that word's first piece
    keep = [i for k, i in enumerate(ids) if not (
        tokenizer.id_to_token(i) == WORD_START and k + 1 < len(ids) and ids[k + 1] == MASK)]
    if len(keep) + 2 > max_len:
        raise KjaxError(f"{text!r} is {len(keep)} tokens; the model takes {max_len - 2} "
                        f"(data.max_seq_len {max_len} with [CLS] and [SEP])")
    full = np.asarray([CLS, *keep, SEP], np.int32)
    return full, [int(p) for p in np.flatnonzero(full == MASK)]


def readable(piece: str) -> tuple[str, bool]:
    """(text, starts a word) of a vocabulary piece; a bare ▁ is ("", True)."""
    if piece.startswith(WORD_START):
        return piece[len(WORD_START):], True
    return piece, False


def fill_text(text: str, which: int, answer: str, starts_word: bool) -> str:
    """`text` with its `which`-th [MASK] replaced by the answer (a space
    before an answer that starts a word where the text had none)."""
    parts = text.split(MASK_TEXT)
    head = MASK_TEXT.join(parts[:which + 1])
    glue = " " if starts_word and head and not head[-1].isspace() else ""
    return head + glue + (answer or "␣") + MASK_TEXT.join(parts[which + 1:])


def shown(answer: Answer) -> str:
    """An answer as the tables print it."""
    return WORD_BOUNDARY if not answer.text else answer.text


# ---- the model -----------------------------------------------------------------------

class FillMask:
    """A checkpoint's MLM head over texts with [MASK]s (float32, no dropout)."""

    def __init__(self, config, workdir: str, step: int | None = None, tokenizer=None,
                 weights: str = "params"):
        from kjax.checkpoint.restore import restore_params
        from kjax.tokens.factory import open_tokenizer
        from kjax.train.state import make_model
        self.tokenizer = tokenizer or open_tokenizer(config)
        check_supported(config, self.tokenizer)
        self.params, self.step = restore_params(config, workdir, step, weights)
        c = copy_of(config)
        c.model.dtype = "float32"
        self.seq_len = config.data.max_seq_len
        model = make_model(c, deterministic=True)

        @jax.jit
        def probabilities(params, input_ids, attention_mask, positions):
            out = model.apply({"params": params}, input_ids, jnp.zeros_like(input_ids),
                              attention_mask, mlm_positions=positions)
            return jax.nn.softmax(out["mlm_logits"].astype(jnp.float32), axis=-1)
        self._probabilities = probabilities

    def predict(self, texts: list[str], top_k: int = 5, batch_size: int = 16,
                progress=None) -> list[list[list[Answer]]]:
        """Per text, per [MASK] (in order): the top_k answers, likeliest first."""
        encoded = [encode_masked(self.tokenizer, t, self.seq_len) for t in texts]
        longest = max(len(ids) for ids, _ in encoded)
        seq = min(self.seq_len, -(-longest // 8) * 8)    # few shapes, few compiles
        slots = max(len(p) for _, p in encoded)
        results = []
        for start in range(0, len(texts), batch_size):
            chunk = encoded[start:start + batch_size]
            rows = chunk + [chunk[0]] * (batch_size - len(chunk))   # one batch shape
            ids = np.zeros((batch_size, seq), np.int32)
            mask = np.zeros_like(ids)
            where = np.zeros((batch_size, slots), np.int32)
            for r, (row, positions) in enumerate(rows):
                ids[r, :len(row)], mask[r, :len(row)] = row, 1
                where[r, :len(positions)] = positions
            probs = np.asarray(jax.device_get(self._probabilities(self.params, ids, mask, where)))
            for r, (text, (_, positions)) in enumerate(zip(texts[start:], chunk)):
                results.append([self._answers(text, j, probs[r, j], top_k)
                                for j in range(len(positions))])
            if progress is not None:
                progress.update(len(chunk))
        return results

    def _answers(self, text: str, which: int, probs: np.ndarray, top_k: int) -> list[Answer]:
        order = np.argsort(-probs)[:top_k]
        out = []
        for i in order:
            piece = self.tokenizer.id_to_token(int(i))
            answer, starts = readable(piece)
            out.append(Answer(piece, answer, starts, float(probs[i]),
                              fill_text(text, which, answer, starts)))
        return out


# ---- the check set -------------------------------------------------------------------

def read_check_set(path: str | None = None) -> list[tuple[str, list[str]]]:
    """(sentence with one [MASK], accepted answers) of a TSV check set."""
    from kjax import paths
    path = path or CHECK_SET
    if not paths.isfile(path):
        raise KjaxError(f"--check {path!r} not found; pass a TSV file: a sentence with one "
                        f"[MASK], a tab, the accepted answers separated by |")
    rows = []
    for n, line in enumerate(paths.read_text(path).splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        sentence, _, answers = line.partition("\t")
        if sentence.count(MASK_TEXT) != 1 or not answers.strip():
            raise KjaxError(f"{path}:{n}: a check line is a sentence with one [MASK], a tab "
                            f"and the accepted answers separated by | (got {line!r})")
        rows.append((sentence, [a.strip() for a in answers.split("|") if a.strip()]))
    if not rows:
        raise KjaxError(f"{path}: no check sentences (lines: sentence<TAB>answer|answer)")
    return rows


def is_hit(answer: Answer, accepted: list[str], starts_word: bool) -> bool:
    return answer.text in accepted and answer.starts_word == starts_word


def run_check(filler: FillMask, rows, top_k: int = 5) -> dict:
    """Top-1 and top-k hit rates over the check set, with every row's answers."""
    answers = filler.predict([s for s, _ in rows], top_k)
    out, top1, topk = [], 0, 0
    for (sentence, accepted), (found,) in zip(rows, answers):
        starts = mask_starts_word(sentence)[0]
        hits = [is_hit(a, accepted, starts) for a in found]
        top1 += hits[0]
        topk += any(hits)
        out.append({"sentence": sentence, "accepted": accepted, "hit_rank":
                    hits.index(True) + 1 if any(hits) else None,
                    "answers": [dataclasses.asdict(a) for a in found]})
    n = len(rows)
    return {"step": filler.step, "sentences": n, "top_k": top_k, "top1": top1 / n,
            "topk": topk / n, "rows": out}
