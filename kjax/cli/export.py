"""`kjax export` and `kjax import`: checkpoints to and from transformers.

    kjax export [--config C] --workdir W [--step N] [--weights params|ema] --out DIR
                [--dtype float32|bfloat16]
                [--encoder-only] [--no-verify]
    kjax import --hf DIR --out W [--generator GEN] [--config BASE] [--config-out FILE]

torch and transformers are imported only when a verb runs (`pip install
'kjax[torch]'`), so the rest of the command line never pays for them.
"""
from __future__ import annotations

import json

from kjax.cli.common import add_weights
from kjax.errors import KjaxError


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise KjaxError(f"{e.name} is not installed; `pip install torch==2.13.0` (CPU build) "
                        f"then `pip install 'transformers>=5,<6'`, or `pip install "
                        f"-e '.[torch]'`") from None


def _print(result: dict) -> None:
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


def run_export(args, config) -> int:
    """The writer of the run's architecture's format (kjax/export/formats.py)."""
    _require_torch()
    from kjax.export.formats import format_of
    from kjax.model.arch import architecture
    write = format_of(architecture(config)).write
    _print(write(config, args.workdir, args.out, args.step, args.dtype,
                 with_heads=not args.encoder_only, verify=not args.no_verify,
                 weights=args.weights))
    return 0


def run_import(args, config) -> int:
    """The reader of the format the folder holds (kjax/export/formats.py)."""
    _require_torch()
    from kjax.export.formats import FORMATS, folder_format
    read = FORMATS[folder_format(args.hf, args.generator)].read
    _print(read(args.hf, args.generator, args.out, config, args.config_out))
    return 0


def register(verbs, add_config) -> None:
    ex = verbs.add_parser(
        "export", help="checkpoint → transformers folder (config.json, model.safetensors, "
        "tokenizer, model card) that AutoModel loads with no custom code",
        description="Writes a checkpoint of WORKDIR as a transformers 5 folder: config.json, "
        "model.safetensors, the tokenizer, README.md (model card), kjax_export.json. The config "
        "is the one the run recorded (WORKDIR/kjax_config.py) unless --config is given. The "
        "heads that trained are written, none that did not (an MLM-only run: BertForMaskedLM, "
        "no NSP head or pooler; --encoder-only leaves them out): pipeline('fill-mask', "
        "model=OUT) answers as `kjax fill-mask` does. One-hot models load with "
        "AutoModel.from_pretrained(OUT) (no custom code); multi-hot (UKnowBERT) models also get "
        "modeling_kjax_multihot.py and need trust_remote_code=True. morph-sp/multihot "
        "tokenizers need kjax installed. The folder is loaded back and compared with kjax "
        "unless --no-verify. See docs/EXPORT.md.")
    add_config(ex, required=False)
    ex.add_argument("--workdir", required=True, help="the training run (holds checkpoints/)")
    ex.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
    add_weights(ex)
    ex.add_argument("--out", required=True, help="output folder")
    ex.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="weights dtype in model.safetensors (default float32)")
    heads = ex.add_mutually_exclusive_group()
    heads.add_argument("--encoder-only", action="store_true",
                       help="write the encoder alone, with the pooler if NSP trained it "
                       "(BertModel / ElectraModel / KjaxMultihotModel); default: with the heads "
                       "that trained (MLM + NSP: BertForPreTraining; MLM alone: "
                       "BertForMaskedLM, no pooler), so pipeline('fill-mask') and "
                       "AutoModelForMaskedLM load the trained head. Knowledge heads are never "
                       "written. ELECTRA (model.arch=electra): OUT/discriminator "
                       "(ElectraForPreTraining) and OUT/generator (ElectraForMaskedLM); "
                       "--encoder-only: OUT/discriminator as ElectraModel alone")
    heads.add_argument("--with-pretraining-heads", action="store_true",
                       help="the default since the heads are always written; still accepted")
    ex.add_argument("--no-verify", action="store_true",
                    help="skip loading the folder back with transformers and comparing logits")
    ex.set_defaults(handler=run_export)

    im = verbs.add_parser(
        "import", help="local transformers BERT/RoBERTa/ELECTRA folder → kjax checkpoint "
        "(W/checkpoints/0) + config file",
        description="Converts a local transformers folder (BERT, RoBERTa, ELECTRA "
        "discriminator, or a kjax multi-hot export) into OUT/checkpoints/0 plus a kjax config "
        "file, for `kjax train`/`kjax finetune` to start from. Nothing is downloaded; weights "
        "are read from safetensors or with torch.load(weights_only=True). --config is the "
        "base for everything the folder does not say (data, training; the tokenizer when the "
        "folder has none: its tokenizer.json or vocab.txt is copied to OUT/tokenizer.json, "
        "tokenizer.scheme='imported'). Heads "
        "the folder lacks are freshly initialised and listed in OUT/import.json. An ELECTRA "
        "pair (--hf holding discriminator/ and generator/, as `kjax export` of an ELECTRA "
        "run writes it, or --hf DISC --generator GEN) becomes one model.arch=electra run: "
        "generator, discriminator and RTD head, their embeddings shared. See docs/EXPORT.md.")
    add_config(im, required=False)
    im.add_argument("--hf", required=True, help="folder with config.json + weights "
                    "(nothing is downloaded)")
    im.add_argument("--out", required=True, help="workdir to create (checkpoints/0, "
                    "import.json, kjax_config.py, tokenizer.json)")
    im.add_argument("--generator", default=None, metavar="GEN",
                    help="the ELECTRA generator folder (ElectraForMaskedLM) that trained with "
                    "the discriminator --hf: both become one model.arch=electra run (not "
                    "needed when --hf holds discriminator/ and generator/)")
    im.add_argument("--config-out", default=None,
                    help="where to write the kjax config (default OUT/kjax_config.py)")
    im.set_defaults(handler=run_import)
