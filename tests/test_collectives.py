"""What a compiled step communicates (kjax/pretrain/collectives.py), read from
hand-written HLO in the forms XLA:TPU and XLA:GPU print: loops counted by
their trip counts, nested loops multiplied, async pairs counted once, groups
of one device left out, the wire bytes of ring algorithms."""
from __future__ import annotations

import pytest

from kjax.pretrain import collectives

MIB = 1 << 20

# The microbatch loop (trip count from its condition, as XLA:TPU prints it)
# holding the layer loop (XLA:GPU's known_trip_count): an all-reduce of a
# layer's bf16 gradient in the inner body, the f32 table's in the outer one;
# after the loops a reduce-scatter (iota groups) and its asynchronous form (a
# tuple of operands and results: XLA:GPU's), an all-gather (mesh groups) and an
# asynchronous all-reduce over a group of one device.
HLO = """HloModule jit_train_step, is_scheduled=true, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%layer_body (p: (s32[], bf16[1024,512]{1,0:T(8,128)(2,1)})) -> (s32[], bf16[1024,512]) {
  %p = (s32[], bf16[1024,512]{1,0:T(8,128)(2,1)}) parameter(0)
  %g = bf16[1024,512]{1,0:T(8,128)(2,1)} get-tuple-element(%p), index=1
  %ar = bf16[1024,512]{1,0:T(8,128)(2,1)} all-reduce(%g), channel_id=1, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0','axis_1'}, to_apply=%add, metadata={op_name="jit(train_step)/while/body/layers/dot"}
  ROOT %t = (s32[], bf16[1024,512]) tuple(%i, %ar)
}

%layer_cond (p: (s32[], bf16[1024,512])) -> pred[] {
  %p = (s32[], bf16[1024,512]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %lt = pred[] compare(%i, %i), direction=LT
}

%micro_body (q: (s32[], f32[2048,256])) -> (s32[], f32[2048,256]) {
  %q = (s32[], f32[2048,256]) parameter(0)
  %x = f32[2048,256]{1,0} get-tuple-element(%q), index=1
  %inner = (s32[], bf16[1024,512]) while(%init), condition=%layer_cond, body=%layer_body, backend_config={"known_trip_count":{"n":"12"}}
  %table = f32[2048,256]{1,0} all-reduce(%x), channel_id=2, replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=%add
  ROOT %t = (s32[], f32[2048,256]) tuple(%j, %table)
}

%micro_cond (q: (s32[], f32[2048,256])) -> pred[] {
  %q = (s32[], f32[2048,256]) parameter(0)
  %k = s32[]{:T(256)} constant(4)
  %j = s32[]{:T(256)} get-tuple-element(%q), index=0
  ROOT %lt = pred[]{:T(1024)} compare(%j, %k), direction=LT
}

ENTRY %main (w: f32[4096,512], v: f32[512,512], s: f32[64]) -> f32[512,512] {
  %w = f32[4096,512]{1,0} parameter(0)
  %v = f32[512,512]{1,0} parameter(1)
  %s = f32[64]{0} parameter(2)
  %loop = (s32[], f32[2048,256]) while(%start), condition=%micro_cond, body=%micro_body
  %rs = f32[512,512]{1,0} reduce-scatter(%w), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  %ag = f32[4096,512]{1,0} all-gather(%v), channel_id=4, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, dimensions={0}
  %rss = ((f32[4096,512]{1,0}), (f32[512,512]{1,0})) reduce-scatter-start(%w), channel_id=6, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  %rsd = f32[512,512]{1,0} reduce-scatter-done(%rss)
  %one = f32[64]{0} all-reduce-start(%s), channel_id=5, replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}, to_apply=%add
  %done = f32[64]{0} all-reduce-done(%one)
  ROOT %r = f32[512,512]{1,0} copy(%rs)
}
"""


def test_loops_are_counted_by_their_trip_counts_and_nested_loops_multiply():
    ops = {c["name"]: c for c in collectives.collectives(HLO)}
    assert set(ops) == {"ar", "table", "rs", "rss", "ag"}   # the group of one is left out
    assert (ops["ar"]["runs"], ops["ar"]["bytes"], ops["ar"]["group"]) == (48, MIB, 8)
    assert (ops["table"]["runs"], ops["table"]["bytes"]) == (4, 2 * MIB)
    assert (ops["rs"]["runs"], ops["rs"]["bytes"]) == (1, 8 * MIB)   # the whole input
    assert ops["rss"]["bytes"] == 8 * MIB
    assert (ops["ag"]["runs"], ops["ag"]["bytes"]) == (1, 8 * MIB)   # the whole result
    assert ops["ar"]["op_name"] == "jit(train_step)/while/body/layers/dot"


def test_the_summary_per_kind_in_loops_and_on_the_wire():
    s = collectives.summary(HLO)
    assert s["all-reduce"] == 48 * MIB + 4 * 2 * MIB
    assert (s["all-gather"], s["reduce-scatter"]) == (8 * MIB, 16 * MIB)
    assert s["in_loops"] == 56 * MIB and s["ops"] == 5 and s["unknown_loops"] == 0
    assert s["wire"] == int(56 * MIB * 2 * 7 / 8) + 3 * int(8 * MIB * 7 / 8)


def test_a_loop_without_a_trip_count_is_counted_once_and_said():
    text = HLO.replace(', backend_config={"known_trip_count":{"n":"12"}}', "")
    s = collectives.summary(text)
    assert s["unknown_loops"] == 1 and s["all-reduce"] == 4 * MIB + 4 * 2 * MIB


@pytest.mark.parametrize("shape, size", [("bf16[2,768]{1,0:T(8,128)(2,1)}", 3072),
                                         ("(f32[], s8[10], pred[3])", 17), ("token[]", 0)])
def test_shapes_in_bytes(shape, size):
    assert collectives.nbytes(shape) == size


def test_growth_is_named_per_kind_and_small_changes_pass():
    before = {"all-reduce": 600 * MIB, "all-gather": 0, "wire": 1000 * MIB}
    assert collectives.grew(before, {**before, "all-reduce": 603 * MIB}) == []
    assert collectives.grew(before, {"all-reduce": 300 * MIB, "all-gather": 400 * MIB,
                                     "wire": 1200 * MIB}) == [
        "all-gather 0.0 → 400.0 MiB", "wire 1000.0 → 1200.0 MiB"]
