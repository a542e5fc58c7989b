"""`kjax config show [--config C] [--diff WORKDIR] [--json]`: every key of the
one config tree (kjax/config/schema.py) with its value and one line of
meaning, section by section.

    --config C      the values of that file (+ --config.KEY=VALUE overrides);
                    without it: the defaults (+ overrides)
    --diff WORKDIR  only the keys where the run's recorded config
                    (WORKDIR/kjax_config.py) differs from the shown one, with
                    both values
    --json          one object per key: key, value, default, allowed, meaning
                    (and recorded, with --diff)
    --schedule      instead of the keys: the learning rate train.schedule
                    gives at a handful of steps (0, the end of warmup, the
                    quarters of the run, num_steps), one line each

Output (one line per key; `*` marks a value that is not the default):

    model
      hidden_size = 768            hidden size H (int >= 1)
    * num_layers = 2               encoder layers (int >= 1)
"""
from __future__ import annotations

import json

from kjax.cli.common import _width
from kjax.errors import KjaxError


def register(verbs, add_config) -> None:
    p = verbs.add_parser("config", help="the config tree: `kjax config show` lists every key, "
                         "its value and meaning")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = actions.add_parser("show", help="every key of the config (default: the defaults), its "
                           "value, allowed values and one line of meaning")
    add_config(s, required=False)
    s.add_argument("--diff", default=None, metavar="WORKDIR", help="only the keys where the "
                   "config recorded in WORKDIR (kjax_config.py) differs, with both values")
    s.add_argument("--json", action="store_true", help="print JSON instead of lines")
    s.add_argument("--schedule", action="store_true", help="the learning rate at a handful of "
                   "steps (train.schedule, warmup, num_steps) instead of the keys")
    s.set_defaults(handler=run_show, own_config=True)


def _value(config, dotted: str):
    node = config
    for name in dotted.split("."):
        node = node[name]
    return node.to_dict() if hasattr(node, "to_dict") else node


def _shown(value) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(map(repr, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def rows(config, recorded=None) -> list[dict]:
    """One dict per schema key (schema order); with `recorded`, only the keys
    whose recorded value differs."""
    from kjax.config.schema import leaves
    out = []
    for dotted, key in leaves().items():
        value = _value(config, dotted)
        row = {"key": dotted, "value": value, "default": key.default,
               "allowed": key.allowed(), "meaning": key.meaning}
        if recorded is not None:
            row["recorded"] = _value(recorded, dotted)
            if _norm(row["recorded"]) == _norm(value):
                continue
        out.append(row)
    return out


def _norm(value):
    return list(value) if isinstance(value, tuple) else value


def format_rows(rows_: list[dict], diff_name: str | None = None) -> str:
    lines, section = [], None
    # The meanings line up, except after the few very long values.
    width = min(max([_width(_line(r, diff_name)) for r in rows_] + [0]), 44)
    for r in rows_:
        head = r["key"].split(".")[0] if "." in r["key"] else ""
        if head != section:
            section = head
            lines.append(section or "(top level)")
        text = _line(r, diff_name)
        pad = " " * max(width - _width(text), 0)
        lines.append(f"{text}{pad}  {r['meaning']} ({r['allowed']})")
    return "\n".join(lines)


def _line(r: dict, diff_name: str | None) -> str:
    mark = "*" if _norm(r["value"]) != _norm(r["default"]) else " "
    name = r["key"].split(".", 1)[-1]
    if diff_name is not None:
        return f"{mark} {name} = {_shown(r['value'])}  ({diff_name}: {_shown(r['recorded'])})"
    return f"{mark} {name} = {_shown(r['value'])}"


def run_show(args, _config) -> int:
    from kjax import paths
    from kjax.config import apply_overrides, defaults, load_config
    from kjax.config.recorded import recorded_config_path
    config = (load_config(args.config, args.overrides) if args.config
              else apply_overrides(defaults(), args.overrides))
    if args.schedule:
        return show_schedule(config, args.json)
    recorded = None
    if args.diff is not None:
        from kjax.pretrain import run_folder
        path = recorded_config_path(args.diff)
        if not paths.isfile(path):
            raise KjaxError(f"--diff {args.diff}: no {path} (`kjax train` records a run's "
                            f"config there at its first step); pass a training run's workdir")
        record = run_folder.read_recorded(args.diff)
        recorded = record.config
        config = run_folder.as_the_run_takes_it(config, record)   # its paths as the run's
    found = rows(config, recorded)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=1, default=str))
        return 0
    shown = args.config or "the defaults" + (" + overrides" if args.overrides else "")
    if recorded is not None:
        print(f"{len(found)} keys differ between {shown} and {args.diff}'s recorded config")
    else:
        print(f"{len(found)} keys of {shown} (* : not the default)")
    if found:
        print(format_rows(found, args.diff))
    return 0


def show_schedule(config, as_json: bool) -> int:
    """The learning-rate curve of the config's train section, a line a step."""
    from kjax.config import validate
    from kjax.train.schedules import schedule_points
    validate(config)   # a wsd decay that overlaps the warmup: one line, not a curve
    points = schedule_points(config.train)
    if as_json:
        print(json.dumps([{"step": s, "learning_rate": lr, "note": n} for s, lr, n in points]))
        return 0
    t = config.train
    shape = f", decay_fraction {t.decay_fraction}, decay_shape {t.decay_shape}" \
        if t.schedule == "wsd" else ""
    print(f"train.schedule={t.schedule!r}: peak {t.learning_rate:g}, warmup {t.warmup_steps}, "
          f"{t.num_steps} steps, final_lr_fraction {t.final_lr_fraction:g}{shape}")
    width = len(str(t.num_steps))
    for step, lr, what in points:
        print(f"  step {step:>{width}}  lr {lr:.4e}" + (f"  {what}" if what else ""))
    if t.batch_ramp:   # the batch of each step (the rate stays a function of the step)
        from kjax.config.batch_ramp import describe
        print(f"train.batch_ramp ({t.batch_ramp_unit}):")
        for line in describe(config):
            print(f"  {line}")
    return 0
