"""The peers kjax is timed against, each a side for harness.step.alternate:

- HF transformers 4.57 `FlaxBertForPreTraining` (the last transformers with
  Flax), in its own virtual environment and process (flax_bert_worker.py),
  answering "run N steps" with its seconds per step;
- transformers 5's PyTorch `ModernBertForMaskedLM` (`torch_step`), in this
  process.
Both get kjax's settings for the same model: dims, vocabulary, sequence,
batch, predictions, dropout, dtype and the optimizer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.presets import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
FLAX_VENV = os.path.join(ROOT, "runs", "peer_venv")


def ensure_flax_venv(path: str, jax_version: str) -> str:
    """bin/python of a venv with transformers 4.57 + this jax (made on first use)."""
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        subprocess.run(["python3", "-m", "venv", path], check=True)
    probe = subprocess.run([python, "-c", "import transformers, flax, optax"],
                           capture_output=True)
    if probe.returncode:
        print(f"installing the peer into {path} ...", file=sys.stderr, flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "transformers==4.57.*",
                        f"jax=={jax_version}", "flax", "optax"], check=True)
    return python


def flax_spec(config) -> dict:
    """What the Flax worker needs to build the same model and optimizer."""
    m, o = config.model, config.train
    return {**{k: m[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                                 "intermediate_size", "max_position_embeddings",
                                 "dropout_rate", "attention_dropout_rate")},
            "batch": o.batch_size, "seq": config.data.max_seq_len, "dtype": m.dtype,
            "predictions": config.data.max_predictions_per_seq,
            "optimizer": {"lr": o.learning_rate, "warmup": o.warmup_steps, "steps": o.num_steps,
                          "clip": o.grad_clip_norm, "b1": o.b1, "b2": o.b2, "eps": o.eps,
                          "weight_decay": o.weight_decay}}


class FlaxBertPeer:
    """HF FlaxBertForPreTraining in its own process: it compiles while kjax's
    sides do (`wait()` for its compile + first step, loss and versions)."""
    name = "HF FlaxBertForPreTraining"

    def __init__(self, python: str, config):
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "flax_bert_worker.py"), json.dumps(flax_spec(config))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "")})
        self.ready = None

    def wait(self) -> dict:
        self.ready = self.ready or self._read()
        return self.ready

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer worker exited (rc {self.proc.wait()}); see stderr")
        return json.loads(line)

    def run(self, steps: int) -> float:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self._read()["step_s"]

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)


def torch_step(enc, batch, lr, device: str = "cpu", bf16: bool = False, compile: bool = False):
    """transformers' ModernBertForMaskedLM training step on the same batch:
    sparse prediction (logits at the masked positions, as kjax), AdamW, clip 1.
    On a GPU: fp32 weights with bf16 autocast (the PyTorch user's mixed
    precision), fused AdamW, optionally torch.compile. Returns (step, number
    of parameters); step() returns the loss (waiting for the device)."""
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


class TorchModernBert:
    """transformers' ModernBertForMaskedLM as a side: `run(n)` → s per step."""

    def __init__(self, config, batch, device: str = "cpu", compile: bool = False):
        import time

        import torch
        import transformers

        from kjax.model.config import EncoderConfig
        start = time.perf_counter()
        self.step, self.params = torch_step(EncoderConfig.from_config(config.model), batch,
                                            config.train.learning_rate, device,
                                            device == "cuda", compile)
        self.loss = self.step()
        self.first_step_s = time.perf_counter() - start
        self.versions = {"transformers": transformers.__version__, "torch": torch.__version__}
        self.threads = torch.get_num_threads()

    def run(self, steps: int) -> float:
        import time
        start = time.perf_counter()
        for _ in range(steps):
            self.step()      # float(loss) waits for the device
        return (time.perf_counter() - start) / steps
