"""The optimized-HLO checks of `make gpu-check` (compile_checks/hlo.py),
on snippets written as XLA:GPU prints them (the bert_base step's scatters,
jax 0.10.2, H100 target), the kernel/transpose/traffic count
benchmarks/step/hlo_traffic.py prints, and the platform attention lowers for."""
import os
import subprocess
import sys

from compile_checks.hlo import kernel_traffic, scatter_findings

TOKEN_TYPE = ("  ROOT %scatter-add.12.1 = bf16[2,768]{1,0} scatter(%param_0.2469, %bitcast.160.2, "
              "%bitcast.199.2), update_window_dims={1,2}, inserted_window_dims={}, "
              "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%region_44.101, "
              'metadata={op_name="jit(train_step)/transpose(jvp(BertForPreTraining))/'
              'token_type_embeddings/jit(_take)/scatter-add"}')
WORDS_BF16 = ("  ROOT %scatter-add.13.1 = bf16[32000,768]{1,0} scatter(%p, %i, %u), "
              "update_window_dims={1,2}, inserted_window_dims={}, "
              "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%region_44")
WORDS_F32 = WORDS_BF16.replace("bf16", "f32").replace("13.1", "14")
NSP_POINTS = ("  ROOT %scatter-add.7.1 = f32[32,2]{1,0} scatter(%p, %i, %u), "
              "update_window_dims={1,2}, inserted_window_dims={}, "
              "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%region_3")
UNIQUE_BF16 = ("  %scatter.3 = bf16[32,512,768]{2,1,0} scatter(%p, %i, %u), update_window_dims={1,2,3}, "
               "inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, "
               "indices_are_sorted=true, unique_indices=true, to_apply=%region_44")
SMALL_F32 = "%s.9 = f32[512,768]{1,0} scatter(%p, %i, %u), scatter_dims_to_operand_dims={0}"
VARIADIC = ("  %sc = (f16[64,8]{1,0}, f32[64,8]{1,0}) scatter(%a, %b, %i, %u, %v), "
            "scatter_dims_to_operand_dims={0,1}, to_apply=%r")


def test_a_small_table_and_a_16_bit_scatter_are_named_one_line_each():
    text = "\n".join(["HloModule jit_train_step", TOKEN_TYPE, WORDS_BF16, WORDS_F32,
                      NSP_POINTS, UNIQUE_BF16, SMALL_F32, VARIADIC,
                      "  %gather.1 = bf16[2,768]{1,0} gather(%t, %i)", TOKEN_TYPE])
    assert scatter_findings(text) == [
        "scatter-add.12.1: bf16[2,768]: a scatter-add into a table of 2 rows (< 1024: use a "
        "one-hot matmul); bf16 updates with indices not declared unique (16-bit atomic adds) "
        "(at token_type_embeddings/jit(_take)/scatter-add)",
        "scatter-add.13.1: bf16[32000,768]: bf16 updates with indices not declared unique "
        "(16-bit atomic adds)",
        "s.9: f32[512,768]: a scatter-add into a table of 512 rows (< 1024: use a one-hot "
        "matmul)",
        "sc: f16[64,8], f32[64,8]: f16 updates with indices not declared unique "
        "(16-bit atomic adds)"]


def test_a_clean_program_has_no_findings():
    # fp32 tables of >= 1024 rows, a point scatter (the loss' [batch, 2]), and a
    # bf16 scatter that declares its indices unique
    assert scatter_findings("\n".join([WORDS_F32, NSP_POINTS, UNIQUE_BF16])) == []
    assert scatter_findings(SMALL_F32, small_rows=512) == []


ENTRY = """HloModule jit_train_step
%fused_add (p0: bf16[4,8]) -> bf16[4,8] {
  ROOT %nested = bf16[4,8]{1,0} fusion(%p0), kind=kLoop, calls=%x
}

ENTRY %main (a: bf16[4,8], b: f32[8,2]) -> (bf16[8,4], f32[4,2]) {
  %a = bf16[4,8]{1,0} parameter(0)
  %b = f32[8,2]{1,0} parameter(1)
  %input_transpose_fusion.3 = bf16[8,4]{1,0} fusion(%a), kind=kInput, calls=%t
  %gemm_fusion_dot.1 = f32[4,2]{1,0} fusion(%a, %b), kind=kCustom, calls=%g
  %cudnn = (pred[4,8]{1,0}, s32[]) custom-call(%a), custom_call_target="x"
  %add.1 = f32[4,2]{1,0} add(%gemm_fusion_dot.1, %gemm_fusion_dot.1)
  ROOT %t = (bf16[8,4]{1,0}, f32[4,2]{1,0}) tuple(%input_transpose_fusion.3, %add.1)
}
"""


def test_kernel_traffic_counts_the_entry_kernels_and_their_bytes():
    """Entry fusions and custom calls only (not the nested computation's, not
    plain ops); bytes of operands and results by dtype width."""
    assert kernel_traffic(ENTRY) == {
        "kernels": 3, "transposes": 1,
        "bytes": (64 + 64)                  # the transpose: bf16[4,8] in, bf16[8,4] out
        + (64 + 64 + 32)                    # the dot: bf16[4,8], f32[8,2] in, f32[4,2] out
        + (64 + 32 + 4)}                    # the custom call: bf16[4,8] in, (pred, s32) out
    assert kernel_traffic("HloModule empty") == {"kernels": 0, "transposes": 0, "bytes": 0}


def test_hlo_traffic_benchmark_prints_a_row_per_variant(tmp_path):
    """benchmarks/step/hlo_traffic.py at CPU sizes (its H100 target needs the CUDA
    plugin of build/gpu-venv): one row per variant, the HLO kept."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "step", "hlo_traffic.py"), "--target", "cpu",
         "--config", "demo", "--seq", "32", "--batch", "8", "--hlo", str(tmp_path),
         "--variant", "demo=", "--variant", "wider=model.intermediate_size=512", "--no-record"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines()
            if line.startswith("| ") and "variant" not in line]
    assert [r[0].strip() for r in rows] == ["demo", "wider"]
    assert all(int(r[2]) > 0 and float(r[4]) > 0 for r in rows)
    assert float(rows[1][4]) > float(rows[0][4])   # a wider FFN moves more bytes
    assert sorted(os.listdir(tmp_path)) == ["variant0.hlo.txt", "variant1.hlo.txt"]


def test_attention_asks_the_platform_it_lowers_for():
    """Traced on this CPU host for a GPU or TPU (make gpu-check, kjax compile),
    attention takes that device's path, not the host's."""
    import jax.numpy as jnp

    from kjax.model import attention_core
    from kjax.config.platform import lowering_for, platform
    assert platform() == "cpu"
    assert attention_core.choose_impl("auto", shaking=False, explicit=False,
                                      dtype=jnp.bfloat16) == "xla"
    with lowering_for("cuda"):   # a CUDA topology's devices say "cuda"
        assert platform() == "gpu"
        assert attention_core.choose_impl("auto", shaking=False, explicit=False,
                                          dtype=jnp.bfloat16) == "dot_product"
        with lowering_for("tpu"):
            assert platform() == "tpu"
        assert platform() == "gpu"
    assert platform() == "cpu"
