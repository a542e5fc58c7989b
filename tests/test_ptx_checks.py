"""ptxas' report on the Pallas kernels, as `make gpu-check` reads it
(compile_checks/ptx.py): the report below is ptxas 13.5's own output for
kjax's dk/dv kernel at 128 × 128 tiles with 4 warps (sm_90a), the
tiling that spilled; the PTX folder is a hand-made dump with a fake ptxas."""
import os
import stat

import pytest

from compile_checks.ptx import assemble, dumped_kernels, findings, parse_ptxas

SPILLING = """\
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are \
serialized due to insufficient register resources for the wgmma pipeline in the function \
'shake_flash_dkv' in line 719
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'shake_flash_dkv' for 'sm_90a'
ptxas info    : Function properties for shake_flash_dkv
    424 bytes stack frame, 568 bytes spill stores, 552 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 424 bytes cumulative stack size
ptxas info    : Compile time = 529.992 ms
"""
CLEAN = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'shake_flash_forward' for 'sm_90a'
ptxas info    : Function properties for shake_flash_forward
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 122 registers, used 1 barriers
"""


def test_the_report_gives_registers_spills_and_serialized_wgmma_per_kernel():
    kernels = parse_ptxas(SPILLING + CLEAN)
    assert kernels == {
        "shake_flash_dkv": {"registers": 255, "spill_stores": 568, "spill_loads": 552,
                            "wgmma_serialized": True},
        "shake_flash_forward": {"registers": 122, "spill_stores": 0, "spill_loads": 0,
                                "wgmma_serialized": False}}
    assert findings(kernels) == [
        "shake_flash_dkv spills registers (568 bytes stored, 552 loaded; 255 registers)",
        "shake_flash_dkv: ptxas serializes its wgmma for lack of registers"]
    assert findings(parse_ptxas(CLEAN)) == []


def fake_ptxas(tmp_path, reports: dict, fail: str = ""):
    """A ptxas that prints the report of the kernel named in the PTX file it is given."""
    script = tmp_path / "ptxas"
    lines = ["#!/bin/sh", 'for a in "$@"; do case "$a" in *.ptx) f="$a";; esac; done']
    for name, report in reports.items():
        path = tmp_path / f"{name}.report"
        path.write_text(report)
        lines.append(f'grep -q "entry {name}(" "$f" && cat "{path}" >&2')
    if fail:
        lines.append(f'grep -q "entry {fail}(" "$f" && {{ echo "ptxas fatal: bad PTX" >&2; '
                     'exit 1; }')
    lines.append("exit 0")
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def write_ptx(folder, name, wgmma):
    body = "\n".join(["\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};"] * wgmma)
    (folder / f"module_0001.jit_loss.{name}.ptx").write_text(
        f".version 9.0\n.target sm_90a\n\n.visible .entry {name}(\n\t.param .u64 p\n)\n{{\n"
        f"{body}\n}}\n")


def test_only_the_named_kernels_of_a_dump_are_assembled(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    write_ptx(dump, "shake_flash_dkv", 3)
    write_ptx(dump, "shake_flash_forward", 2)
    write_ptx(dump, "loop_add_fusion", 0)
    ptxas = fake_ptxas(tmp_path, {"shake_flash_dkv": SPILLING, "shake_flash_forward": CLEAN},
                       fail="loop_add_fusion")     # XLA's own fusions are never assembled
    kernels = dumped_kernels(str(dump), ptxas, prefix="shake_flash")
    assert sorted(kernels) == ["shake_flash_dkv", "shake_flash_forward"]
    assert kernels["shake_flash_dkv"]["wgmma"] == 3 and kernels["shake_flash_dkv"]["spill_stores"] == 568
    assert kernels["shake_flash_forward"]["wgmma"] == 2
    with pytest.raises(RuntimeError, match=r"ptxas failed on .*loop_add_fusion\.ptx: ptxas fatal"):
        assemble(os.path.join(dump, "module_0001.jit_loss.loop_add_fusion.ptx"), ptxas)
