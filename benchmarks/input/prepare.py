"""`kjax prepare` throughput end to end on KLUE dev text (NLI premises and
hypotheses, STS sentences, NER sentences without tags), per tokenizer scheme:

  - chars/s and morphemes/s of the whole prepare (read, analyse, tokenize,
    pair, mask the eval split, write shards) with 1 worker, as a ratio to raw
    Kiwi analysis (KoreanAnalyzer.analyze_many, one thread) of the same text
    in the same run — target >= 0.8x for the Kiwi schemes;
  - scaling from 1 to 2 worker processes — target >= 1.8x. Reported on wall
    time, and without the workers' start (spawn, imports, tokenizer and Kiwi
    load: measured as a 2-worker prepare of a 2-document corpus).

Tokenizers are trained on the same text first (not timed). Every timing is
the best of --trials runs. Prints a table and writes one record per row
(with the load average: other jobs may share the cores) to
benchmarks/results/prepare.jsonl; --no-record skips that.

    python benchmarks/input/prepare.py [--schemes morph-sp multihot] [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402
from klue_text import klue_sentences, write_corpus  # noqa: E402

from kjax.config import apply_override, load_config  # noqa: E402
from kjax.pretrain.prepare import prepare  # noqa: E402
from kjax.morph import KoreanAnalyzer  # noqa: E402
from kjax.tokens.factory import open_tokenizer, train_tokenizer  # noqa: E402

ROOT = harness.ROOT
SCHEMES = ("sentencepiece", "morph-sp", "multihot")


def timed(fn, trials: int) -> tuple[float, float, object]:
    """(best wall seconds, CPU seconds of that run incl. reaped children, result)."""
    best = None
    for _ in range(trials):
        r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - start
        r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
        cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime
                  for a, b in ((r0, r1), (c0, c1)))
        if best is None or wall < best[0]:
            best = (wall, cpu, result)
    return best


def scheme_config(tmp: str, scheme: str, corpus: str, vocab: int, docs_per_chunk: int):
    config = load_config(os.path.join(ROOT, "tpu_configs", "demo.py"), [
        f"--config.tokenizer.scheme={scheme}", f"--config.tokenizer.vocab_size={vocab}",
        f"--config.tokenizer.path={tmp}/{scheme}/tok", f"--config.data.corpus={corpus}",
        "--config.data.document_per_file=False", f"--config.data.docs_per_chunk={docs_per_chunk}",
        "--config.tokenizer.min_syllable_count=5", f"--config.data.dir={tmp}/{scheme}/ex",
        "--config.data.mask_unit=" + ("morpheme" if scheme == "multihot" else "eojeol")])
    train_tokenizer(config)
    apply_override(config, f"--config.model.vocab_size={open_tokenizer(config).vocab_size}")
    return config


def run_prepare(config, workers: int, directory: str):
    shutil.rmtree(directory, ignore_errors=True)
    apply_override(config, f"--config.data.dir={directory}")
    return prepare(config, num_workers=workers, progress=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    ap.add_argument("--repeat", type=int, default=1, help="the KLUE text this many times")
    ap.add_argument("--vocab", type=int, default=4000, help="tokenizer.vocab_size")
    ap.add_argument("--docs-per-chunk", type=int, default=64)
    ap.add_argument("--trials", type=int, default=2)
    records.add_arguments(ap)
    args = ap.parse_args()
    import kiwipiepy
    load_before = harness.load_average()
    tmp = tempfile.mkdtemp(prefix="kjax-bench-prepare-")
    sentences = klue_sentences() * args.repeat
    corpus = write_corpus(os.path.join(tmp, "klue.txt"), klue_sentences(), repeat=args.repeat)
    chars = sum(map(len, sentences))
    tiny = write_corpus(os.path.join(tmp, "tiny.txt"), sentences[:2], sentences_per_doc=1)

    analyzer = KoreanAnalyzer()
    analyzer.analyze("워밍업 문장입니다.")          # Kiwi's model is loaded before timing
    kiwi_s, kiwi_cpu, morphemes = timed(
        lambda: sum(len(m) for m in analyzer.analyze_many(sentences)), args.trials)
    rows = [("raw Kiwi analysis", "1 thread", kiwi_s, kiwi_cpu, 1.0, "")]
    for scheme in args.schemes:
        config = scheme_config(tmp, scheme, corpus, args.vocab, args.docs_per_chunk)
        one, one_cpu, meta = timed(lambda: run_prepare(config, 1, f"{tmp}/{scheme}/w1"),
                                   args.trials)
        two, two_cpu, _ = timed(lambda: run_prepare(config, 2, f"{tmp}/{scheme}/w2"), args.trials)
        small = with_corpus(config, tiny)
        start, _, _ = timed(lambda: run_prepare(small, 2, f"{tmp}/{scheme}/start"), args.trials)
        steady = one / max(two - start, 1e-9)
        rows.append((f"prepare {scheme}", "1 worker", one, one_cpu, kiwi_s / one,
                     f"{meta['train_examples']} train examples, {meta['chunks']} chunks"))
        rows.append((f"prepare {scheme}", "2 workers", two, two_cpu, kiwi_s / two,
                     f"scaling {one / two:.2f}x wall, {steady:.2f}x without the "
                     f"{start:.1f} s worker start"))
    header = ("| run | parallelism | wall s | CPU s | chars/s | morphemes/s | vs raw Kiwi | "
              "notes |\n|---|---|---|---|---|---|---|---|")
    lines = [f"| {name} | {par} | {wall:.1f} | {cpu:.1f} | {chars / wall:,.0f} | "
             f"{morphemes / wall:,.0f} | {ratio:.2f}x | {note} |"
             for name, par, wall, cpu, ratio, note in rows]
    text = (f"KLUE dev text ×{args.repeat}: {len(sentences):,} sentences, {chars:,} chars, "
            f"{morphemes:,} Kiwi morphemes; vocab {args.vocab}, {args.docs_per_chunk} "
            f"documents (of 8 sentences) per chunk; best of {args.trials}.")
    table = "\n".join([text, "", header, *lines])
    print(table)
    shutil.rmtree(tmp, ignore_errors=True)
    records.save(args, "prepare", [
        {"row": f"{name}, {par}", "figures": {
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "chars_per_s": round(chars / wall),
            "morphemes_per_s": round(morphemes / wall), "vs_raw_kiwi": round(ratio, 2)},
         **({"notes": note} if note else {})}
        for name, par, wall, cpu, ratio, note in rows],
        load_before=load_before, extra_versions={"kiwipiepy": kiwipiepy.__version__},
        workload=text)


def with_corpus(config, corpus: str):
    copy = config.copy_and_resolve_references()
    apply_override(copy, f"--config.data.corpus={corpus}")
    return copy


if __name__ == "__main__":
    main()
