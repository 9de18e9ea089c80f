"""Bucket table: default llama.cpp/vLLM classification, first match wins, other + unmatched."""

from __future__ import annotations

import pytest

from parity.config import BucketRule, load_profile, profile_from_dict
from parity.errors import ConfigError
from parity.profiles.buckets import OTHER, BucketTable, attribute, default_table, load_table_file, table_for
from parity.profiles.nsys import KernelGroup

# kernel names as they demangle from the vendored llama.cpp CUDA source and vLLM,
# with the seeds' bucket for each
CASES = [
    ("void gated_delta_net_cuda<128, false, true>(float const*, float*, int)", "gdn_core"),
    ("void mul_mat_q<(ggml_type)40, 128, false, (ggml_prec)0>(char const*, int const*, float*)", "mmq_nvfp4"),
    ("void mul_mat_q<(ggml_type)39, 64, false, (ggml_prec)0>(char const*, int const*, float*)", "mmq_mxfp4"),
    ("void mul_mat_q<(ggml_type)8, 64, true, (ggml_prec)0>(char const*, int const*, float*)", "mmq_other"),
    ("void mul_mat_q_stream_k_fixup<(ggml_type)40, 128, false>(int const*, float*)", "mmq_fixup"),
    ("void quantize_mmq_nvfp4<(mmq_q8_1_ds_layout)0>(float const*, void*, long)", "act_quant"),
    ("void quantize_mmq_q8_1<(mmq_q8_1_ds_layout)1>(float const*, void*, long)", "act_quant"),
    ("void flash_attn_ext_f16<128, 128, 4, 1, false, false>(char const*, float*)", "fa"),
    ("void flash_attn_tile<128, 128, 32, 1, false>(char const*, float*)", "fa"),
    ("void k_get_rows_float<float, float>(float const*, int const*, float*, long)", "get_rows"),
    ("void k_bin_bcast<&op_add, float, float, float>(float const*, float const*, float*, int)", "ew_add"),
    ("void k_bin_bcast<&op_mul, float, float, float>(float const*, float const*, float*, int)", "ew_mul"),
    ("void concat_f32_dim1(float const*, float const*, float*, int, int)", "concat_layout"),
    ("void ssm_conv_f32<128, 4>(float const*, float const*, float*, int)", "gdn_conv"),
    ("void l2_norm_f32<32>(float const*, float*, int, long, float)", "gdn_l2norm"),
    ("void rms_norm_f32<1024, true, false>(float const*, float*, int)", "norm"),
    ("void mm_ids_helper<8>(int const*, int*, int*, int)", "mm_ids"),
    ("void cpy_scalar<&cpy_1_scalar<float, __half>>(char const*, char*, int)", "convert_dtype"),
    ("void cpy_scalar_contiguous<float, float>(char const*, char*, long)", "copy_layout"),
    ("nvjet_sm121_tst_128x64_64x6_2x1_v_bz_TNT", "cublas_bf16_gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)", "cutlass_bf16_gemm"),
    ("void marlin::Marlin<(vllm::ScalarTypeId)6, 256, 1, 8, 8, 4, false>(int4 const*)", "marlin"),
    ("fused_moe_kernel", "fused_moe"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16*)", "act"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(long)", "kv_write"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "gdn_core"),
    ("triton_poi_fused_add_mul_0", "triton_other"),
    ("void some_kernel_nobody_knows(int)", OTHER),
]


@pytest.mark.parametrize("name,bucket", CASES)
def test_default_table_classifies_seed_kernels(name, bucket):
    assert default_table().classify(name) == bucket


def test_first_match_wins_and_other():
    t = BucketTable([BucketRule("a", "mul_mat"), BucketRule("b", "mul_mat_q")], "t")
    assert t.classify("mul_mat_q<1>") == "a"
    assert t.classify("rope") == OTHER
    assert t.order() == ["a", "b", OTHER]


def test_attribute_hand_computed():
    t = BucketTable([BucketRule("gdn", "gated_delta", "GDN"), BucketRule("conv", "ssm_conv", "GDN"), BucketRule("mmq", "mul_mat_q")], "t")
    groups = [
        KernelGroup("gated_delta_net_cuda<128>", 6_000_000, 3, 3),  # 6 ms, 3 launches
        KernelGroup("ssm_conv_f32", 1_000_000, 4, 4),
        KernelGroup("mul_mat_q<40>", 2_000_000, 8, 8),
        KernelGroup("mystery_a", 500_000, 1),
        KernelGroup("mystery_b", 500_000, 5),
    ]
    r = attribute(groups, t, top_unmatched=1)
    rows = {b["bucket"]: b for b in r["buckets"]}
    assert r["total_ms"] == 10.0 and r["kernels"] == 21 and r["graph_node_kernels"] == 15
    assert rows["gdn"] == {"bucket": "gdn", "total_ms": 6.0, "share": 0.6, "instances": 3, "ms_per_launch": 2.0}
    assert rows["mmq"]["ms_per_launch"] == 0.25 and rows[OTHER]["total_ms"] == 1.0 and rows[OTHER]["instances"] == 6
    assert [b["bucket"] for b in r["buckets"]][0] == "gdn"  # sorted by time
    assert len(r["unmatched_top"]) == 1 and r["unmatched_top"][0]["name"] in ("mystery_a", "mystery_b")
    groups_ = {g["bucket"]: g for g in r["groups"]}
    assert groups_["GDN"]["total_ms"] == 7.0 and groups_["GDN"]["instances"] == 7


def test_bad_tables_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="bad regex"):
        BucketTable([BucketRule("x", "(")], "t")
    with pytest.raises(ConfigError, match="reserved"):
        BucketTable([BucketRule(OTHER, "x")], "t")
    f = tmp_path / "b.yaml"
    f.write_text("buckets:\n  - {name: a}\n")
    with pytest.raises(ConfigError, match="name and a pattern"):
        load_table_file(f)
    f.write_text("buckets:\n  - {name: a, pattern: x, colour: red}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_table_file(f)


def test_profile_buckets_override_default():
    prof = load_profile("smoke")
    assert table_for(prof.profiling).source.endswith("buckets.yaml")
    prof.profiling.buckets = [BucketRule("mine", "gated")]
    t = table_for(prof.profiling)
    assert t.classify("gated_delta_net_cuda") == "mine" and t.classify("mul_mat_q") == OTHER


def test_profile_bucket_regex_validated():
    with pytest.raises(ConfigError, match=r"profiling.buckets\[0\].pattern"):
        profile_from_dict({"name": "x", "profiling": {"buckets": [{"name": "a", "pattern": "(["}]}})
