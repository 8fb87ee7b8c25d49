"""benchmarks/xla_census.py --atomics: which kernels of an XLA dump add floats atomically (can vary run to run in
one process), named with the TF op each came from. A planted dump: PTX of three kernels and its optimized HLO."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("xla_census", ROOT / "benchmarks" / "xla_census.py")
census = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(census)

PTX = """
.version 8.0
.visible .entry loop_add_fusion_2(
  .param .u64 p0
)
{
  add.f32 %f3, %f1, %f2;
  st.global.f32 [%rd1], %f3;
  atom.global.add.u32 %r2, [%rd2], 1;
}
.visible .entry scatter_fusion_1(
  .param .u64 p0
)
{
  red.global.add.f32 [%rd4], %f7;
  red.relaxed.gpu.global.add.noftz.bf16x2 [%rd5], %r9;
  red.global.v4.f32.add [%rd6], {%f1, %f2, %f3, %f4};
}
.visible .entry input_reduce_fusion_7(
  .param .u64 p0
)
{
  atom.global.cas.b32 %r4, [%rd3], %r5, %r6;
}
"""
HLO = "\n".join([
    "HloModule a_inference_train_step_7437__XlaMustCompile_true, entry_computation_layout={()->()}",
    "ENTRY %main {",
    '  %loop_add_fusion.2 = f32[8]{0} fusion(f32[8]{0} %p0), kind=kLoop, calls=%fused_add, '
    'metadata={op_type="AddV2" op_name="model/add"}',
    "  %scatter_fusion.1 = f32[30522,768]{1,0} scatter(f32[30522,768]{1,0} %z, s32[4096]{0} %i, "
    'f32[4096,768]{1,0} %u), metadata={op_type="UnsortedSegmentSum" '
    'op_name="gradient_tape/embeddings/UnsortedSegmentSum"}',
    "  ROOT %input_reduce_fusion.7 = (f32[768]{0}, f32[768]{0}) fusion(f32[4096,768]{1,0} %g), kind=kInput, "
    "calls=%fused_reduce",
    "}",
])


def test_the_kernels_that_add_floats_atomically_are_named_with_their_tf_op(tmp_path):
    stem = "module_0007.a_inference_train_step_7437__XlaMustCompile_true.sm_9.0_gpu"
    (tmp_path / f"{stem}.ptx").write_text(PTX)
    (tmp_path / f"{stem}_gpu_after_optimizations.txt").write_text(HLO)
    rows = census.atomics(tmp_path).set_index("kernel")
    assert sorted(rows.index) == ["input_reduce_fusion_7", "scatter_fusion_1"]  # the integer atomic is not one
    scatter = rows.loc["scatter_fusion_1"]
    assert (scatter["float atomic adds"], scatter["compare-and-swap"]) == (3, 0)  # the vector's qualifiers after
    assert (scatter["hlo"], scatter["op_type"]) == ("scatter", "UnsortedSegmentSum")
    assert scatter["op_name"] == "gradient_tape/embeddings/UnsortedSegmentSum"
    reduce = rows.loc["input_reduce_fusion_7"]
    assert (reduce["float atomic adds"], reduce["compare-and-swap"], reduce["hlo"]) == (0, 1, "fusion")
    assert set(rows["module"]) == {"a_inference_train_step_7437"}


def test_each_scatter_fusion_is_listed_from_the_hlo_alone_with_its_element_type_and_whether_its_indices_are_an_iota(
        tmp_path):
    hlo = "\n".join([
        "HloModule a_inference_body_16136__XlaMustCompile_true, entry_computation_layout={()->()}",
        "%fused_scatter.1 (param_0.2: f32[128,768], param_1.3: f32[128,768]) -> f32[128,768] {",
        "  %param_0.2 = f32[128,768]{1,0} parameter(0)",
        "  %iota.9.1 = s32[128,1]{1,0} iota(), iota_dimension=0",
        "  %bitcast.581.1 = f32[128,1,768]{2,1,0} bitcast(%param_1.3)",
        "  ROOT %UnsortedSegmentSum_2.5.1 = f32[128,768]{1,0} scatter(%param_0.2, %iota.9.1, %bitcast.581.1), "
        "update_window_dims={1,2}, to_apply=%add",
        "}",
        "%fused_scatter.2 (param_0.3: s64[30522,768], param_1.4: s64[4096,1], param_2.5: s64[4096,1,768]) -> "
        "s64[30522,768] {",
        "  %param_0.3 = s64[30522,768]{1,0} parameter(0)",
        "  %param_1.4 = s64[4096,1]{1,0} parameter(1)",
        "  %param_2.5 = s64[4096,1,768]{2,1,0} parameter(2)",
        "  ROOT %scatter.19.1 = s64[30522,768]{1,0} scatter(%param_0.3, %param_1.4, %param_2.5), to_apply=%add",
        "}",
        "ENTRY %main {",
        "  %input_scatter_fusion.1 = f32[128,768]{1,0} fusion(%a, %b), kind=kInput, calls=%fused_scatter.1, "
        'metadata={op_type="UnsortedSegmentSum" op_name="cond/adam/UnsortedSegmentSum_2"}',
        "  %input_scatter_fusion.2 = s64[30522,768]{1,0} fusion(%c, %d, %e), kind=kInput, calls=%fused_scatter.2, "
        'metadata={op_type="UnsortedSegmentSum" op_name="cond/adam/UnsortedSegmentSum/opbisect_patch/x"}',
        "  ROOT %loop_add_fusion.3 = f32[8]{0} fusion(%f), kind=kLoop, calls=%fused_add",
        "}",
    ])
    (tmp_path / "module_0001.a_inference_body_16136__XlaMustCompile_true.sm_9.0a_gpu_after_optimizations.txt") \
        .write_text(hlo)
    rows = census.scatters(tmp_path).set_index("kernel")
    assert sorted(rows.index) == ["input_scatter_fusion_1", "input_scatter_fusion_2"]  # not the loop fusion
    assert rows.loc["input_scatter_fusion_1", ["type", "iota indices"]].tolist() == ["f32", True]
    assert rows.loc["input_scatter_fusion_2", ["type", "iota indices"]].tolist() == ["s64", False]
    assert set(rows["module"]) == {"a_inference_body_16136"}

