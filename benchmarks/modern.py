"""The modern recipe (model.arch=modern) on this machine, three measurements,
each alternating its two sides in one invocation (rounds) so load drift hits
both alike:

    python benchmarks/modern.py arch      # modern vs BERT at equal parameters on the
                                          # demo corpus: tokens/s and eval MLM loss
                                          # after equal training time
    python benchmarks/modern.py peer      # kjax modern vs transformers 5
                                          # ModernBertForMaskedLM (PyTorch) train step,
                                          # same config, same batch; target ≥ 1.5×
    python benchmarks/modern.py packing   # train.packing on vs off: real tokens/s
                                          # (loader → step), paragraphs as documents

`arch` and `packing` prepare their data under runs/bench_modern/ (the demo
corpus, embedded; the tokenizer is trained once). Results are appended to
docs/PERFORMANCE.md (--no-record: print only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import _common

WORK = os.path.join(_common.ROOT, "runs", "bench_modern")
# Equal encoder parameters: BERT's FFN 2·H·I = GeGLU's 3·H·I' with I' = 2/3 I.
ARCH_SIDES = {"bert": {"model.arch": "bert", "model.intermediate_size": 384},
              "modern": {"model.arch": "modern", "model.intermediate_size": 256}}


def demo_config(extra: dict):
    from kjax.config import load_config
    from kjax.config.presets import modern_overrides
    values = {**modern_overrides(128), "model.num_layers": 3, "model.local_attention": 32,
              "model.dtype": "float32", "tokenizer.path": f"{WORK}/tok/sp",
              "data.dir": f"{WORK}/examples", "train.num_steps": 100_000,
              "train.warmup_steps": 30, "train.learning_rate": 1e-3, **extra}
    return load_config(os.path.join(_common.ROOT, "tpu_configs", "demo.py"),
                       [f"--config.{k}={v}" for k, v in values.items()])


def prepared(config):
    from kjax import paths
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import tokenizer_file, train_tokenizer
    if not paths.isfile(tokenizer_file(config)):
        train_tokenizer(config)
    return prepare(config, progress=False)


def count_params(state) -> int:
    import jax
    return sum(x.size for x in jax.tree.leaves(state["params"]))


def run_arch(args):
    import jax
    import numpy as np
    from kjax.batches.loader import eval_batches, train_dataset
    from kjax.parallel.mesh import put_batch
    from kjax.train.step import make_eval_step, summarize_eval
    sides = {}
    for name, extra in ARCH_SIDES.items():
        cfg = demo_config(extra)
        if not sides:
            prepared(cfg)
        fn, state, mesh = _common.train_step(cfg)
        sides[name] = {"cfg": cfg, "fn": fn, "state": state, "mesh": mesh, "tokens": 0,
                       "time": 0.0, "it": iter(train_dataset(cfg)), "params": count_params(state)}
        state, m = fn(state, put_batch(next(sides[name]["it"]), mesh))   # compile
        jax.block_until_ready(m)
        sides[name]["state"] = state
    load = _common.load_average()
    for r in range(args.rounds):
        for name, s in sides.items():
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                batch = next(s["it"])
                s["state"], m = s["fn"](s["state"], put_batch(batch, s["mesh"]))
                jax.block_until_ready(m)
                s["tokens"] += int(np.sum(batch["attention_mask"]))
            s["time"] += time.perf_counter() - start
        print(f"round {r}: " + "; ".join(f"{n} {s['tokens'] / s['time']:.0f} tok/s"
                                         for n, s in sides.items()), flush=True)
    lines = ["| model | parameters | tokens/s | train time s | steps | eval MLM loss | "
             "eval MLM accuracy |", "|---|---|---|---|---|---|---|"]
    for name, s in sides.items():
        cfg = s["cfg"]
        from kjax.train.state import make_model
        shardings = jax.tree.map(lambda x: x.sharding, s["state"]["params"])
        step = make_eval_step(cfg, s["mesh"], make_model(cfg, True), shardings)
        sums = [step(s["state"]["params"], put_batch(b, s["mesh"]))
                for b in eval_batches(cfg, cfg.train.batch_size, 0)]
        ev = summarize_eval(jax.device_get(sums))
        lines.append(f"| {name} (L3 H128, FFN {cfg.model.intermediate_size}) | {s['params']:,} | "
                     f"{s['tokens'] / s['time']:.0f} | {s['time']:.0f} | "
                     f"{int(s['state']['step'])} | {ev['mlm_loss']:.3f} | "
                     f"{ev['mlm_accuracy']:.3f} |")
    notes = (f"Demo corpus (embedded), rows of 128, batch 32, fp32, MLM only at 30 % masking, "
             f"no dropout, lr 1e-3; the same examples in the same order for both; "
             f"{args.rounds} alternating rounds of {args.seconds:.0f} s each side. Equal "
             f"encoder parameters: BERT FFN 384 (2·H·I) vs GeGLU 256 (3·H·I'); BERT adds its "
             f"position table, biases and NSP head. Load average before/after: {load} / "
             f"{_common.load_average()}.")
    _common.record("modern vs BERT, equal parameters and time", "\n".join(lines), notes,
                   args.no_record)


def torch_step(enc, batch, lr, device: str = "cpu", bf16: bool = False, compile: bool = False):
    """transformers' ModernBertForMaskedLM training step on the same batch:
    sparse prediction (logits at the masked positions, as kjax), AdamW, clip 1.
    On a GPU (benchmarks/accelerator.py): fp32 weights with bf16 autocast (the
    PyTorch user's mixed precision), fused AdamW, optionally torch.compile."""
    import contextlib

    import torch
    from transformers import ModernBertForMaskedLM

    from kjax.export.modernbert_export import modernbert_config
    model = ModernBertForMaskedLM(modernbert_config(enc)).to(device).train()
    model.config.sparse_prediction = True
    model.sparse_prediction = True
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, eps=1e-6,
                            fused=device == "cuda")
    forward = torch.compile(model) if compile else model
    ids = torch.as_tensor(batch["input_ids"], dtype=torch.long)
    mask = torch.as_tensor(batch["attention_mask"], dtype=torch.long)
    labels = torch.full_like(ids, -100)
    rows = torch.arange(ids.shape[0])[:, None].expand(-1, batch["mlm_positions"].shape[1])
    labels[rows, torch.as_tensor(batch["mlm_positions"], dtype=torch.long)] = \
        torch.as_tensor(batch["mlm_ids"], dtype=torch.long)
    ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
    autocast = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if bf16 else \
        contextlib.nullcontext

    def step():
        with autocast():
            loss = forward(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())
    return step, sum(p.numel() for p in model.parameters())


def run_peer(args):
    import jax
    import numpy as np
    import torch
    import transformers

    from kjax.model.config import EncoderConfig
    from kjax.parallel.mesh import put_batch
    cfg = _common.preset_config("modern_small", args.seq, args.batch, "float32",
                                [f"--config.data.max_predictions_per_seq="
                                 f"{round(0.3 * args.seq)}"])
    enc = EncoderConfig.from_config(cfg.model)
    batch = _common.synthetic_batch(cfg, np.random.default_rng(0))
    fn, state, mesh = _common.train_step(cfg)
    device_batch = put_batch(batch, mesh)
    state, m = fn(state, device_batch)
    jax.block_until_ready(m)
    tstep, tparams = torch_step(enc, batch, cfg.train.learning_rate)
    tstep()
    kjax_t, torch_t = [], []
    load = _common.load_average()
    for r in range(args.rounds):
        state, per = _common.timed_steps(fn, state, device_batch, args.steps)
        kjax_t.append(per)
        start = time.perf_counter()
        for _ in range(args.steps):
            tstep()
        torch_t.append((time.perf_counter() - start) / args.steps)
        print(f"round {r}: kjax {per:.3f} s/step, torch {torch_t[-1]:.3f} s/step", flush=True)
    k, t = statistics.median(kjax_t), statistics.median(torch_t)
    ratios = [b / a for a, b in zip(kjax_t, torch_t)]
    tok = args.batch * args.seq
    lines = ["| side | versions | parameters | seq | batch | s/step | tokens/s |",
             "|---|---|---|---|---|---|---|",
             f"| kjax modern | jax {jax.__version__} | {count_params(state):,} | {args.seq} | "
             f"{args.batch} | {k:.3f} | {tok / k:.0f} |",
             f"| transformers ModernBertForMaskedLM | transformers {transformers.__version__}, "
             f"torch {torch.__version__} ({torch.get_num_threads()} threads, sdpa) | "
             f"{tparams:,} | {args.seq} | {args.batch} | {t:.3f} | {tok / t:.0f} |"]
    verdict = "holds" if t / k >= 1.5 else "MISSED"
    notes = (f"modern_small (6 layers, H256, 4 heads, GeGLU 384, local 128 / global every 3, "
             f"32k vocabulary), fp32, 30 % predictions (sparse prediction on both sides), "
             f"AdamW + clipping, dropout 0. kjax/transformers tokens/s = **{t / k:.2f}×** "
             f"(per-round {min(ratios):.2f}–{max(ratios):.2f}×, {args.rounds} rounds × "
             f"{args.steps} steps each side, alternating); target ≥ 1.5×: {verdict}. "
             f"Load average before/after: {load} / {_common.load_average()}.")
    _common.record("modern peer: kjax vs transformers ModernBERT", "\n".join(lines), notes,
                   args.no_record)


def run_packing(args):
    import jax
    import numpy as np
    from kjax.batches.loader import train_dataset
    from kjax.parallel.mesh import put_batch
    paragraphs = {"data.document_per_file": False, "data.dir": f"{WORK}/examples_paragraphs",
                  "model.intermediate_size": 256, "train.nsp_weight": 0.0}
    sides, meta = {}, prepared(demo_config(paragraphs))
    for packing in (False, True):
        cfg = demo_config({**paragraphs, "train.packing": packing})
        fn, state, mesh = _common.train_step(cfg)
        it = iter(train_dataset(cfg))
        state, m = fn(state, put_batch(next(it), mesh))
        jax.block_until_ready(m)
        sides[packing] = {"fn": fn, "state": state, "mesh": mesh, "it": it, "real": 0,
                          "examples": 0, "time": 0.0, "steps": 0}
    load = _common.load_average()
    for r in range(args.rounds):
        for packing, s in sides.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                batch = next(s["it"])
                s["state"], m = s["fn"](s["state"], put_batch(batch, s["mesh"]))
                s["real"] += int(np.sum(batch["attention_mask"]))
                s["examples"] += int(np.sum(batch["segment_ids"].max(axis=1))) if packing \
                    else len(batch["input_ids"])
            jax.block_until_ready(m)
            s["time"] += time.perf_counter() - start
            s["steps"] += args.steps
    lines = ["| train.packing | real tokens/s | examples/s | token fill | steps/s |",
             "|---|---|---|---|---|"]
    rate = {p: s["real"] / s["time"] for p, s in sides.items()}
    for packing, s in sides.items():
        lines.append(f"| {packing} | {rate[packing]:.0f} | {s['examples'] / s['time']:.0f} | "
                     f"{s['real'] / (s['steps'] * 32 * 128):.3f} | "
                     f"{s['steps'] / s['time']:.2f} |")
    notes = (f"Modern demo model (L3 H128 GeGLU 256, fp32), rows of 128, batch 32, the demo "
             f"corpus with paragraphs as documents (data.document_per_file=False: "
             f"prepare's token fill {meta['token_fill']}); loader → put_batch → step, "
             f"{args.rounds} alternating rounds × {args.steps} steps. Packing's gain in real "
             f"tokens/s: **{rate[True] / rate[False]:.2f}×**. Load average before/after: "
             f"{load} / {_common.load_average()}.")
    _common.record("packing", "\n".join(lines), notes, args.no_record)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("arch", "peer", "packing"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="arch: seconds per side a round")
    ap.add_argument("--steps", type=int, default=5, help="peer/packing: steps per side a round")
    ap.add_argument("--seq", type=int, default=512, help="peer: sequence length")
    ap.add_argument("--batch", type=int, default=8, help="peer: batch")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    {"arch": run_arch, "peer": run_peer, "packing": run_packing}[args.what](args)


if __name__ == "__main__":
    main()
