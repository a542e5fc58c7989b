"""`kjax knowledge stats`: how much of a corpus the knowledge resources cover.

    kjax knowledge stats --config tpu_configs/uknowbert_s.py \\
        --config.data.corpus='corpus/*.txt' [--max-docs 2000] [--json]

Reads the configured resources (knowledge.hypernyms / sense_vectors /
case_frames; "" = the samples in kjax/knowledge/data), analyses the corpus
with Kiwi and packs each document's morphemes into sequences of
data.max_seq_len - 3 positions (what a training example holds at most, less
[CLS] and two [SEP]). It then builds the targets exactly as the loader does
and reports: the share of nouns with hypernyms (and with hypernyms that are
single tokens of the vocabulary, which is what the hypernym head can
predict), with sense vectors, of predicates with case frames, which §2.5
rule found each verb's target, and the filled target slots per sequence.
Without a trained multihot tokenizer the vocabulary share is not reported.
"""
from __future__ import annotations

import json

from kjax.knowledge.coverage import knowledge_stats


def register(verbs, add_config) -> None:
    p = verbs.add_parser("knowledge", help="knowledge resources: coverage of a corpus (stats)")
    actions = p.add_subparsers(dest="knowledge_verb", required=True, metavar="ACTION")
    s = actions.add_parser("stats", help="share of corpus nouns with hypernyms / sense "
                           "vectors, predicates with case frames, targets per sequence")
    add_config(s)
    s.add_argument("--max-docs", type=int, default=2000,
                   help="analyse at most this many documents (default 2000; 0: all)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(handler=run_stats)


def format_stats(result: dict) -> str:
    lines = [f"resources: {result['resources']}", f"corpus: {result['corpus']}"]
    if result["vocabulary"] is None:
        lines.append("vocabulary: none (train the multihot tokenizer to see which hypernyms "
                     "the head can predict)")
    for key, value in result["coverage"].items():
        shown = "n/a" if value is None else (f"{value:.3f}" if isinstance(value, float)
                                             else str(value))
        lines.append(f"  {key:<28} {shown}")
    return "\n".join(lines)


def run_stats(args, config) -> int:
    result = knowledge_stats(config, args.max_docs)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json
          else format_stats(result))
    return 0
