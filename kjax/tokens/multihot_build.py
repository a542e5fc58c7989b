"""Building the UKnowBERT vocabulary (METHODS §2.1) and describing what it is
made of (decisions: kjax/tokens/multihot.py's module doc). This module sits
above the vocabulary: it imports kjax/tokens/multihot.py, never the reverse.

    train_tokenizer  raw sentences → Kiwi morphemes → a saved vocabulary and
                     its MultihotTokenizer (`kjax tokenizer train`)
    build_vocab      morpheme sentences → a MultihotVocab
    composition      token counts by kind; `vocab_warnings` when the [UNK]
                     fallback is thin

    1. BPE over `form + TAG-char` units of the training text
    2. pieces rewritten by POS (`마시##`, `##의`, `사과`), duplicates merged,
       pieces the character rules own dropped
    3. fallback tokens: the 67 jamo, the [SYM:*] classes, `하##`/`되##`
    4. `@c` syllable tokens: every Hangul/symbol character of *all* the
       training text's morphemes seen at least max(min_syllable_count,
       ⌈min_syllable_share · all syllable occurrences⌉) times, most frequent first
"""
from __future__ import annotations

import collections
import io
import math
import os
from typing import Iterable, Iterator, Sequence

import sentencepiece as spm

from kjax.errors import KjaxError
from kjax.morph.analyzer import KoreanAnalyzer, Morpheme
from kjax.morph.tags import TAGS, base_tag, tag_id
from kjax.tokens.characters import (CHC, JAMO_TOKENS, OTL, SYLLABLE, SYMBOL_TOKENS, char_class,
                                    is_syllable_char)
from kjax.tokens.multihot import (BASE_TOKENS, DIGIT_TOKENS, FALLBACK_TOKENS, LETTERS,
                                  MultihotTokenizer, MultihotVocab, _number_or_latin,
                                  _shadows_char_rules, _storable, rewrite)
from kjax.tokens.sentencepiece import SPECIAL_TOKENS

_CHAR_RULE_TAGS = {"SN", "SL", "SH"}             # spelled by character rules
_TAG_CHAR_BASE = 0xE000                          # private use area
_WORD_START = "\u2581"
THIN_SYLLABLES = 1000            # fewer @ Hangul syllables: warn (a thin fallback)
THIN_DROPPED_SHARE = 1e-3        # more syllable occurrences below the threshold: warn
KINDS = ("bpe", "syllables", "jamo", "symbols", "digits", "letters", "specials", "classes")


def train_tokenizer(sentences: Iterable[str], path: str, bpe_vocab_size: int,
                    min_syllable_count: int = 1, analyzer: KoreanAnalyzer | None = None,
                    num_workers: int | None = None, **build_options) -> MultihotTokenizer:
    """Analyses raw sentences with Kiwi, builds the vocabulary (§2.1) and
    saves it to `path` (+ `path.json`)."""
    analyzer = (analyzer or KoreanAnalyzer()).joining_predicates()
    vocab = build_vocab(analyzer.analyze_many(sentences, num_workers), bpe_vocab_size,
                        min_syllable_count, **build_options)
    vocab.save(path)
    return MultihotTokenizer(vocab, analyzer)


def build_vocab(morpheme_sentences: Iterable[Sequence], bpe_vocab_size: int,
                min_syllable_count: int = 1, min_syllable_share: float = 1e-8,
                character_coverage: float = 0.9995, input_sentence_size: int = 2_000_000,
                num_threads: int | None = None) -> MultihotVocab:
    """BPE over `form+TAG` units, rewritten by POS, plus syllable, digit,
    letter, [CHC]/[OTL] and fallback tokens (module doc). `morpheme_sentences`
    yields sequences of `Morpheme` or `(form, tag)`, as the tokenizer's
    analyser gives them (X+하/되 joined); it is read once."""
    return MultihotVocab(*_vocab_tokens(morpheme_sentences, bpe_vocab_size, min_syllable_count,
                                        min_syllable_share, character_coverage,
                                        input_sentence_size, num_threads))


def _vocab_tokens(morpheme_sentences: Iterable[Sequence], bpe_vocab_size: int,
                  min_syllable_count: int, min_syllable_share: float,
                  character_coverage: float, input_sentence_size: int,
                  num_threads: int | None) -> tuple[list[str], dict]:
    """(tokens, settings) of a new vocabulary; see the module doc."""
    counts: collections.Counter = collections.Counter()

    def units() -> Iterator[str]:
        for sentence in morpheme_sentences:
            words = []
            for m in sentence:
                form, tag = (m.form, m.tag) if isinstance(m, Morpheme) else m[:2]
                form, tag = "".join(form.split()).replace(_WORD_START, ""), base_tag(tag)
                if not form:
                    continue
                counts[form, tag] += 1
                if tag not in _CHAR_RULE_TAGS and not tag.startswith("W_"):
                    words.append(form + chr(_TAG_CHAR_BASE + tag_id(tag)))
            if words:
                yield " ".join(words)

    pieces = _train_bpe(units(), bpe_vocab_size, character_coverage,
                        input_sentence_size, num_threads)
    vocab = dict.fromkeys(BASE_TOKENS)
    for piece in pieces:
        token = _rewrite_piece(piece)
        if token and _storable(token) and not _shadows_char_rules(token):
            vocab.setdefault(token)
    n_bpe = len(vocab) - len(BASE_TOKENS)
    vocab.update(dict.fromkeys(t for t in FALLBACK_TOKENS if t not in vocab))
    syllables: collections.Counter = collections.Counter()
    for (form, _), n in counts.items():   # every morpheme of the text, not only split ones
        if _number_or_latin(form) is None:
            for c in form:
                if is_syllable_char(c):
                    syllables[c] += n
    total = sum(syllables.values())
    threshold = max(1, min_syllable_count, math.ceil(min_syllable_share * total))
    kept = sorted((c for c, n in syllables.items() if n >= threshold),
                  key=lambda c: (-syllables[c], c))
    for c in kept:
        vocab.setdefault(SYLLABLE + c)
    dropped = sum(n for n in syllables.values() if n < threshold)
    settings = {"bpe_vocab_size": bpe_vocab_size, "min_syllable_count": min_syllable_count,
                "min_syllable_share": min_syllable_share, "syllable_threshold": threshold,
                "bpe_tokens_rewritten": n_bpe, "syllable_tokens": len(kept),
                "hangul_syllables_seen": sum(map(_is_hangul_syllable, syllables)),
                "syllable_occurrences": total,
                "syllable_share_below_threshold": dropped / total if total else 0.0,
                "morpheme_types": len(counts)}
    return list(vocab), settings


def _is_hangul_syllable(c: str) -> bool:
    return 0xAC00 <= ord(c) <= 0xD7A3


def token_kind(token: str) -> str:
    """One of KINDS ("classes": [CHC], [OTL], [SYM:*])."""
    if token in SPECIAL_TOKENS:
        return "specials"
    if token in (CHC, OTL) or token in SYMBOL_TOKENS:
        return "classes"
    if token in DIGIT_TOKENS:
        return "digits"
    if token in LETTERS:
        return "letters"
    if len(token) == 2 and token[0] == SYLLABLE and is_syllable_char(token[1]):
        if char_class(token[1]) == "symbol":
            return "symbols"
        return "syllables" if _is_hangul_syllable(token[1]) else "jamo"
    return "bpe"


def composition(tokens: Sequence[str]) -> dict[str, int]:
    """Token counts by kind: BPE (rewritten), @ Hangul syllables, @ jamo,
    @ symbols/emoji, digits, letters, specials, fallback class tokens."""
    kinds = collections.Counter(map(token_kind, tokens))
    return {**{k: kinds[k] for k in KINDS}, "total": len(tokens)}


def vocab_warnings(vocab: MultihotVocab) -> list[str]:
    """Why `vocab` may leave held-out text in [UNK] (empty: fine)."""
    return thin_fallback_warnings(composition(vocab.tokens), vocab.settings)


def thin_fallback_warnings(composition: dict[str, int], settings: dict) -> list[str]:
    out = []
    has_jamo = all(k in composition for k in ("jamo", "classes"))
    if not has_jamo or composition["jamo"] < len(JAMO_TOKENS) \
            or composition["classes"] < 2 + len(SYMBOL_TOKENS):
        out.append("no jamo/[SYM:*] fallback tokens (a hand-made vocabulary or one built by an "
                   "older kjax): unseen syllables and symbols become [UNK]; rebuild it with "
                   "`kjax tokenizer train`")
    if composition.get("syllables", 0) < THIN_SYLLABLES:
        out.append(f"only {composition.get('syllables', 0)} @ Hangul syllables (modern text "
                   f"uses ~2,350): held-out text will often fall back to jamo (3 tokens a "
                   f"syllable); train the vocabulary on more text")
    below = settings.get("syllable_share_below_threshold", 0.0)
    if below > THIN_DROPPED_SHARE:
        out.append(f"{100 * below:.2f}% of the training text's syllables occur fewer than "
                   f"{settings.get('syllable_threshold')} times and got no @ token: lower "
                   f"tokenizer.min_syllable_count / tokenizer.min_syllable_share")
    return out


def format_composition(composition: dict[str, int], settings: dict) -> str:
    """The lines `kjax tokenizer train` prints for a multi-hot vocabulary."""
    c = composition
    lines = [f"multi-hot vocabulary: {c['total']:,} tokens = {c['bpe']:,} BPE (rewritten by POS)"
             f" + {c['syllables']:,} @syllables + {c['jamo']:,} @jamo + {c['symbols']:,} "
             f"@symbols + {c['digits']} digits + {c['letters']} letters + {c['specials']} "
             f"specials + {c['classes']} fallback classes ([CHC] [OTL] [SYM:*])"]
    if "syllable_threshold" in settings:
        lines.append(f"@ tokens: characters seen >= {settings['syllable_threshold']} times "
                     f"({settings['hangul_syllables_seen']:,} distinct Hangul syllables seen, "
                     f"{100 * settings['syllable_share_below_threshold']:.3f}% of syllable "
                     f"occurrences below the threshold)")
    lines += [f"warning: {w}" for w in thin_fallback_warnings(c, settings)]
    return "\n".join(lines)


def _rewrite_piece(piece: str) -> str | None:
    """A BPE piece → vocabulary token (§2.1), or None for tag-only pieces.
    Only a whole unit (`▁form` + tag) is rewritten by its tag; the tail of a
    unit (`시`+VV out of `마시`+VV) is not a predicate, so it loses the tag
    and is kept like the pieces learned without one."""
    whole = piece.startswith(_WORD_START)
    piece = piece.replace(_WORD_START, "")
    if piece and _TAG_CHAR_BASE <= ord(piece[-1]) < _TAG_CHAR_BASE + len(TAGS):
        form, tag = piece[:-1], TAGS[ord(piece[-1]) - _TAG_CHAR_BASE]
        return (rewrite(form, tag) if whole else form) or None
    return piece or None            # learned without a tag: kept as it is


def _train_bpe(units: Iterator[str], vocab_size: int, character_coverage: float,
               input_sentence_size: int, num_threads: int | None) -> list[str]:
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=units, model_writer=model, vocab_size=vocab_size,
            model_type="bpe", character_coverage=character_coverage,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            hard_vocab_limit=False,          # a small corpus gives a smaller vocabulary
            split_by_unicode_script=False,   # else form and tag char never merge
            normalization_rule_name="identity", unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
            num_threads=num_threads or os.cpu_count() or 1, minloglevel=2)
    except RuntimeError as e:
        raise KjaxError(f"BPE training for the multi-hot vocabulary failed ({e}); check that "
                        f"the corpus is non-empty Korean text") from None
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_unknown(i) or sp.is_control(i))]
