"""Tensor intrinsics: only the target architecture's module is parsed, and MetaSchedule still tunes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from measure.tvmapi import _cpu_intrinsic_modules, make_target

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


@pytest.mark.parametrize(
    ("triple", "modules"),
    [
        ("x86_64-linux-gnu", ["x86"]),
        ("aarch64-linux-gnu", ["arm_cpu"]),
        ("armv7a-linux-gnueabihf", ["arm_cpu"]),
        ("riscv64-unknown-linux-gnu", ["riscv_cpu"]),
        ("wasm32-unknown-unknown", ["x86", "arm_cpu", "riscv_cpu"]),
    ],
)
def test_modules_follow_the_triple(triple, modules):
    assert _cpu_intrinsic_modules(make_target({"kind": "llvm", "mtriple": triple})) == modules


def test_a_fresh_process_registers_its_own_architecture_and_builds_a_space():
    code = textwrap.dedent("""
        import sys
        from tvm import te
        from measure.tvmapi import TENSOR_INTRIN_PACKAGE, make_target, ms, register_tensor_intrinsics
        target = make_target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "num-cores": 2})
        register_tensor_intrinsics(target)
        a = te.placeholder((16, 16), name="a")
        b = te.compute((16, 16), lambda i, j: a[i, j] * 2.0, name="b")
        ctx = ms.TuneContext(mod=te.create_prim_func([a, b]), target=target,
                             space_generator="post-order-apply", task_name="t")
        assert ctx.space_generator.generate_design_space(ctx.mod), "no design space"
        loaded = sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith(TENSOR_INTRIN_PACKAGE + "."))
        print(",".join(loaded))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "x86"
