"""Compile the Triton kernels (``python/sglang_pask/ops/triton_kernels.py``) for an NVIDIA GPU on a
machine without one: Triton's ahead-of-time path lowers each kernel, in every variant the wrappers
launch, to PTX and then to a cubin with the ptxas that Triton ships. A compile check only (types,
unsupported constructs, register allocation): nothing runs. ``make csrc-check`` runs it after the
CUDA sources (``csrc/check.sh``).

    python bench/triton_compile_check.py [--arch 90]   # one line per variant; exit 1 on a failure
"""

from __future__ import annotations

import argparse
import sys

#: kernel -> (its signature as the wrappers call it, the constexpr variants they launch)
KERNELS = {
    "_held_count": ({"mapping": "*i64", "r2t": "*i32", "rows": "*i64", "lens": "*i64", "view_lens": "*i64",
                     "view_keep": "*u8", "counts": "*i32", "bs": "i32", "stride_map": "i64", "stride_r2t": "i32",
                     "stride_vu": "i32", "stride_vb": "i32", "HAS_VIEWS": "constexpr", "BLOCK": "constexpr"},
                    [{"HAS_VIEWS": True, "BLOCK": 128}, {"HAS_VIEWS": False, "BLOCK": 128}]),
    "_held_write": ({"mapping": "*i64", "r2t": "*i32", "rows": "*i64", "lens": "*i64", "view_lens": "*i64",
                     "view_keep": "*u8", "kv_indptr": "*i32", "kv_indices": "*i32", "stride_map": "i64",
                     "stride_r2t": "i32", "stride_vu": "i32", "stride_vb": "i32", "stride_ptr": "i32",
                     "stride_idx": "i32", "HAS_VIEWS": "constexpr", "BLOCK": "constexpr"},
                    [{"HAS_VIEWS": True, "BLOCK": 128}, {"HAS_VIEWS": False, "BLOCK": 128}]),
    **{f"_learned_scores/{x}": ({"x": f"*{x}", "w": "*fp32", "b": "*fp32", "loc": "*i64", "out": "*fp32", "n": "i32",
                                 "D": "i32", "H": "i32", "stride_x": "i32", "stride_out": "i32", "HAS_LOC": "constexpr",
                                 "BLOCK_N": "constexpr", "BLOCK_D": "constexpr", "BLOCK_H": "constexpr"},
                                [{"HAS_LOC": True, "BLOCK_N": 16, "BLOCK_D": 64, "BLOCK_H": 8},
                                 {"HAS_LOC": False, "BLOCK_N": 16, "BLOCK_D": 64, "BLOCK_H": 1}])
       for x in ("bf16", "fp16", "fp32")},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 (H100/H200)")
    a = p.parse_args(argv)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        print(f"triton-compile-check: skipped (triton not importable: {e})")
        return 0
    from sglang_pask.ops import triton_kernels

    kernels = triton_kernels._jit(False)
    failed = 0
    for name, (signature, variants) in KERNELS.items():
        for consts in variants:
            names = list(signature)
            src = ASTSource(fn=kernels[name.split("/")[0]], signature=signature,
                            constexprs={(names.index(k),): v for k, v in consts.items()})
            try:
                compiled = triton.compile(src, target=GPUTarget("cuda", a.arch, 32))
                ok = "cubin" in compiled.asm
                print(f"triton-compile-check: {name} {consts}: {'cubin' if ok else 'no cubin'} for sm_{a.arch} "
                      f"(triton {triton.__version__})")
                failed += not ok
            except Exception as e:  # noqa: BLE001 -- every variant is reported
                print(f"triton-compile-check: {name} {consts}: FAILED: {type(e).__name__}: {e}")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
