"""What every verb module of the command line shares."""
from __future__ import annotations

import argparse
import json
import unicodedata

DEMO_CONFIG = "tpu_configs/demo.py"   # shipped in the wheel too (config.resolve_config_path)


def add_config(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--config FILE and the --config.KEY=VALUE overrides (kjax/config/load.py)."""
    help_text = "Python config file (tpu_configs/*.py)" if required else \
        "Python config file (tpu_configs/*.py; default: the run's WORKDIR/kjax_config.py)"
    p.add_argument("--config", required=required, help=help_text)
    p.add_argument("overrides", nargs="*", default=[], metavar="--config.KEY=VALUE",
                   help="override any config key, e.g. --config.train.num_steps=1000 "
                   "(every key, its value and meaning: `kjax config show`)")


def add_weights(p: argparse.ArgumentParser, of: str = "the checkpoint",
                default: str | None = "params") -> None:
    """--weights: which weights of a run a verb takes (kjax/checkpoint/restore.py)."""
    p.add_argument("--weights", default=default, choices=("params", "ema"),
                   help=f"which weights of {of}: params (the trained parameters; default) or "
                   f"ema (their exponential moving average: a run with train.ema_decay > 0)")


def print_json(result: dict) -> None:
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


def _width(text: str) -> int:
    """Terminal columns: Hangul and Hanja take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_table(columns: list[str], rows: list[list]) -> str:
    """A Markdown table, padded so that Korean text lines up in a terminal."""
    cells = [[str(c) for c in columns]] + [[str(v) for v in row] for row in rows]
    widths = [max(_width(r[i]) for r in cells) for i in range(len(columns))]
    line = lambda r: "| " + " | ".join(v + " " * (w - _width(v))  # noqa: E731
                                       for v, w in zip(r, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])
