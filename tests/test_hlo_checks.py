"""The optimized-HLO checks of `make gpu-check` (kjax/pretrain/hlo_checks.py),
on snippets written as XLA:GPU prints them (the bert_base step's scatters,
jax 0.10.2, H100 target), and the platform attention lowers for."""
from kjax.pretrain.hlo_checks import scatter_findings

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


def test_attention_asks_the_platform_it_lowers_for():
    """Traced on this CPU host for a GPU or TPU (make gpu-check, kjax compile),
    attention takes that device's path, not the host's."""
    import jax.numpy as jnp

    from kjax.model import attention_core
    from kjax.model.platform import lowering_for, platform
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
