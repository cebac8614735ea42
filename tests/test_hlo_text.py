"""The one HLO-text reader explain and predict share: instructions, shapes with layouts, operands, entry."""

from __future__ import annotations

from twinbench import hlo_text

TEXT = """HloModule jit_step, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%fused_add (p.0: f32[8], p.1: f32[8]) -> f32[8] {
  %p.0 = f32[8]{0} parameter(0)
  %p.1 = f32[8]{0} parameter(1)
  ROOT %a = f32[8]{0} add(f32[8]{0} %p.0, f32[8]{0} %p.1)
}

ENTRY %main.9 (x: f32[8]) -> (f32[8], f32[8], f32[8], f32[8], f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0), metadata={op_name="x"}
  %f = bf16[2,4]{0,1:T(8,128)} fusion(%x, %x), kind=kLoop, calls=%fused_add, metadata={op_name="jit(step)/jvp(block0)/mlp/add"}
  ROOT %t = (f32[8]{0}, f32[8]{0}, f32[8]{0}, f32[8]{0}, f32[8]{0}, /*index=5*/f32[8]{0}) tuple(%x, %x, %x, %x, %x, /*index=5*/%f)
}
"""


def test_instructions_shapes_layouts_operands_and_the_entry():
    mod = hlo_text.parse(TEXT)
    assert mod.entry == "main.9" and list(mod.computations) == ["fused_add", "main.9"]
    by = mod.instructions()
    f = by["f"]
    assert (f.opcode, f.shapes, f.layouts, f.operands) == ("fusion", [("bf16", (2, 4))], [(0, 1)], ["x", "x"])
    assert f.calls == "fused_add" and f.op_name == "jit(step)/jvp(block0)/mlp/add" and f.nbytes == 16
    assert f.comp == "main.9" and not f.root
    t = by["t"]
    assert t.root and t.is_tuple and len(t.shapes) == 6 and t.nbytes == 6 * 32
    assert t.operands == ["x", "x", "x", "x", "x", "f"]  # the /*index=5*/ comment is no part of a name
    assert by["a"].operands == ["p.0", "p.1"] and by["p.0"].operands == ["0"]  # a parameter's number
