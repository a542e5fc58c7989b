"""Mask-rate schedules (data.mask_schedule, kjax/config/mask_schedule.py):
the rate by hand, the realised share on the loader, held-out masks at one
named rate whatever the training rate, the logged share, and the one-line
refusals."""
import math

import numpy as np
import pytest

from conftest import tiny_config
from kjax.batches.loader import eval_batches, train_dataset
from kjax.config.mask_schedule import highest_rate, mask_rate
from kjax.errors import KjaxError
from kjax.inputs import input_mode
from kjax.objectives import check_config
from kjax.pretrain.resume_policy import check_resume
from kjax.train.metrics import read_metrics

THIRTY_TO_FIFTEEN = {"data.mask_schedule": "linear", "data.masked_lm_prob": 0.3,
                     "data.final_masked_lm_prob": 0.15, "data.max_predictions_per_seq": 18}


def test_the_rate_of_a_step_by_hand(tmp_path):
    c = tiny_config(tmp_path, **THIRTY_TO_FIFTEEN, **{"data.mask_schedule_steps": 100})
    d = c.data
    assert [mask_rate(d, s, 6) for s in (0, 50, 100, 400)] == pytest.approx(
        [0.3, 0.225, 0.15, 0.15])
    d.mask_schedule = "cosine"
    assert mask_rate(d, 25, 6) == pytest.approx(0.15 + 0.15 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert mask_rate(d, 100, 6) == pytest.approx(0.15)
    d.mask_schedule_steps = 0          # over train.num_steps
    assert mask_rate(d, 3, 6) == pytest.approx(0.225)
    d.mask_schedule, d.eval_masked_lm_prob = "constant", 0.4
    assert mask_rate(d, 3, 6) == 0.3 and highest_rate(d) == 0.4


def test_the_realised_share_follows_a_30_to_15_schedule(prepared):
    """On the loader alone: the masked share of every 100 steps within ±1 point
    of the schedule's mean there (whole-eojeol masking, 8 examples a step)."""
    config = tiny_config(prepared, **THIRTY_TO_FIFTEEN,
                         **{"train.num_steps": 300, "train.batch_size": 8})
    mode, batches = input_mode(config), iter(train_dataset(config))
    shares = []
    for _ in range(300):
        b = next(batches)
        shares.append(b["mlm_weights"].sum() / mode.maskable_positions(b).sum())
    for w in range(3):
        want = np.mean([mask_rate(config.data, s, 300) for s in range(100 * w, 100 * w + 100)])
        assert abs(np.mean(shares[100 * w:100 * w + 100]) - want) < 0.01, (w, want)


def test_held_out_masks_are_the_same_whatever_the_training_rate(prepared):
    """data.eval_masked_lm_prob: masks drawn at that rate from the unmasked
    example by (seed, eval example), so the same parameters give the same
    held-out loss in every phase; 0 keeps prepare's stored masks."""
    named = {"data.eval_masked_lm_prob": 0.15, "data.max_predictions_per_seq": 18}
    runs = [tiny_config(prepared, **named, **{"data.masked_lm_prob": 0.3}),
            tiny_config(prepared, **{**THIRTY_TO_FIFTEEN, **named}),
            tiny_config(prepared, **named)]
    first, *others = [list(eval_batches(c, 16, 2)) for c in runs]
    for other in others:
        assert all(np.array_equal(a[k], b[k]) for a, b in zip(first, other) for k in a)
    stored = list(eval_batches(tiny_config(prepared, **{"data.max_predictions_per_seq": 18}),
                               16, 2))
    assert not all(np.array_equal(a["mlm_positions"], b["mlm_positions"])
                   for a, b in zip(first, stored))
    for rows in first:   # the targets are the original tokens, at about 15 %
        share = rows["mlm_weights"].sum() / input_mode(runs[0]).maskable_positions(rows).sum()
        assert abs(share - 0.15) < 0.02
    thirty = list(eval_batches(tiny_config(prepared, **{**named,
                                                        "data.eval_masked_lm_prob": 0.3}), 16, 1))
    assert thirty[0]["mlm_weights"].sum() > 1.6 * first[0]["mlm_weights"].sum()


def test_a_run_logs_the_realised_share_and_its_rate(trained_run):
    rows = [r for r in read_metrics(trained_run) if r["split"] == "train"]
    assert all(r["mask_rate"] == 0.15 and abs(r["masked_share"] - 0.15) < 0.02 for r in rows)


def test_bad_schedules_are_one_line(prepared, tmp_path):
    with pytest.raises(KjaxError, match=r"data.mask_schedule='linear' needs "
                                        r"data.masking='dynamic'"):
        check_config(tiny_config(tmp_path, **THIRTY_TO_FIFTEEN, **{"data.masking": "static"}))
    with pytest.raises(KjaxError, match=r"max_predictions_per_seq=10 cannot hold the highest "
                                        r"mask rate's predictions \(0.3 of 61 maskable tokens: "
                                        r"18\); set --config.data.max_predictions_per_seq=18"):
        check_config(tiny_config(tmp_path, **{**THIRTY_TO_FIFTEEN,
                                              "data.max_predictions_per_seq": 10}))
    with pytest.raises(KjaxError, match=r"with train.packing=True: a packed row holds"):
        check_config(tiny_config(tmp_path, **THIRTY_TO_FIFTEEN, **{
            "train.packing": True, "train.nsp_weight": 0.0}))
    with pytest.raises(KjaxError, match="final_masked_lm_prob=1.5"):
        check_config(tiny_config(tmp_path, **{"data.final_masked_lm_prob": 1.5}))
    recorded = tiny_config(tmp_path, **THIRTY_TO_FIFTEEN)
    longer = tiny_config(tmp_path, **THIRTY_TO_FIFTEEN, **{"train.num_steps": 12,
                                                           "train.schedule": "constant"})
    recorded.train.schedule = "constant"
    with pytest.raises(KjaxError, match="would stretch the mask-rate schedule"):
        check_resume(longer, recorded, str(tmp_path), 3)
    longer.data.mask_schedule_steps = 6   # the same schedule, written out: passes
    assert any("num_steps" in d for d in check_resume(longer, recorded, str(tmp_path), 3))
