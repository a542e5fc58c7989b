"""The HF Flax peer of benchmarks/step/peer.py (harness.peers.FlaxBertPeer):
transformers' FlaxBertForPreTraining train step, run inside the peer's
virtual environment (no kjax import).

    runs/peer_venv/bin/python benchmarks/harness/flax_bert_worker.py '{"vocab_size": ..., ...}'

Builds the model and a jitted, state-donating AdamW step with the settings
kjax uses (the same optax chain: global-norm clip, AdamW with weight decay on
kernels and embeddings only, warmup + linear decay), compiles it on one
synthetic batch, prints one JSON line {"ready": ..., "versions": ...}, then
answers each stdin line "N" by running N steps and printing
{"step_s": seconds per step}. "quit" ends it.

The loss is what a user of this model writes (transformers' run_mlm_flax.py
and run_bert_flax style): the model returns MLM logits at every position
([b, s, V]); masked-LM cross-entropy is weighted to the masked positions,
plus NSP cross-entropy.
"""
import json
import sys
import time

import numpy as np


def main():
    a = json.loads(sys.argv[1])
    import flax
    import jax
    import jax.numpy as jnp
    import optax
    import transformers
    from transformers import BertConfig, FlaxBertForPreTraining

    cfg = BertConfig(vocab_size=a["vocab_size"], hidden_size=a["hidden_size"],
                     num_hidden_layers=a["num_layers"], num_attention_heads=a["num_heads"],
                     intermediate_size=a["intermediate_size"],
                     max_position_embeddings=a["max_position_embeddings"],
                     hidden_dropout_prob=a["dropout_rate"],
                     attention_probs_dropout_prob=a["attention_dropout_rate"],
                     layer_norm_eps=1e-12, hidden_act="gelu", type_vocab_size=2)
    b, s, p, v = a["batch"], a["seq"], a["predictions"], a["vocab_size"]
    model = FlaxBertForPreTraining(cfg, input_shape=(1, s), seed=0, dtype=jnp.dtype(a["dtype"]))

    o = a["optimizer"]
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, o["lr"], max(1, o["warmup"])),
         optax.linear_schedule(o["lr"], 0.0, max(1, o["steps"] - o["warmup"]))], [o["warmup"]])
    decay = lambda params: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda path, _: getattr(path[-1], "key", None) in ("kernel", "embedding"), params)
    tx = optax.chain(optax.clip_by_global_norm(o["clip"]),
                     optax.adamw(schedule, b1=o["b1"], b2=o["b2"], eps=o["eps"],
                                 weight_decay=o["weight_decay"], mask=decay))
    params = jax.tree.map(jnp.asarray, model.params)
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params),
             "rng": jax.random.key_data(jax.random.key(0))}

    rng = np.random.default_rng(0)
    positions = np.sort(rng.choice(s, (b, p)), -1)
    labels = np.full((b, s), -100, np.int32)
    np.put_along_axis(labels, positions, rng.integers(5, v, (b, p)).astype(np.int32), -1)
    batch = {"input_ids": rng.integers(5, v, (b, s)).astype(np.int32),
             "token_type_ids": (np.arange(s) >= s // 2).astype(np.int32)[None].repeat(b, 0),
             "attention_mask": np.ones((b, s), np.int32), "labels": labels,
             "nsp_labels": rng.integers(0, 2, b).astype(np.int32)}
    batch = jax.device_put(batch)

    def ce(logits, labels, weights):
        losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                                 labels)
        total = jnp.maximum(weights.sum(), 1e-8)
        acc = ((jnp.argmax(logits, -1) == labels) * weights).sum() / total
        return (losses * weights).sum() / total, acc

    def train_step(state, batch):
        rng = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])

        def loss_fn(params):
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                        params=params, dropout_rng=rng, train=True)
            weights = (batch["labels"] >= 0).astype(jnp.float32)
            mlm, mlm_acc = ce(out.prediction_logits, jnp.maximum(batch["labels"], 0), weights)
            nsp, nsp_acc = ce(out.seq_relationship_logits, batch["nsp_labels"],
                              jnp.ones(batch["nsp_labels"].shape, jnp.float32))
            return mlm + nsp, {"loss": mlm + nsp, "mlm_accuracy": mlm_acc,
                               "nsp_accuracy": nsp_acc}

        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        metrics["grad_norm"] = optax.global_norm(grads)
        metrics["learning_rate"] = schedule(state["step"])
        return {**state, "step": state["step"] + 1,
                "params": optax.apply_updates(state["params"], updates),
                "opt_state": opt_state}, metrics

    step = jax.jit(train_step, donate_argnums=(0,))
    start = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready((state, m))
    versions = {"transformers": transformers.__version__, "jax": jax.__version__,
                "flax": flax.__version__, "optax": optax.__version__}
    print(json.dumps({"ready": time.perf_counter() - start, "versions": versions,
                      "loss": float(m["loss"])}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        n = int(line)
        start = time.perf_counter()
        for _ in range(n):
            state, m = step(state, batch)
        jax.block_until_ready((state, m))
        print(json.dumps({"step_s": (time.perf_counter() - start) / n}), flush=True)


if __name__ == "__main__":
    main()
