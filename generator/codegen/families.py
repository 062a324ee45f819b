"""Kernel families: one frozen descriptor per family, every fact about it in one row.

A kernel family is the per-CPU code behind the A8 matrix products, the butterflies, the
quantiser and the attention reads (its template, under templates/kernels/).  Its row in
`FAMILIES` says everything the rest of the project needs to know about it: which template holds its
code, which instruction set it is written for and which compiler flags and CPU features it
needs, how the engine batches a prefill product with it, how decode attention runs on it, and
which optional functions of the contract below it defines itself.  The templates read the
row as `plan.target.family.<trait>`; the build reads it for flags (generator/build/flags.py) and
for which boards and machines can build and run it (generator/build/boards.py).

The contract (docs/architecture.md, "Adding a kernel family"): the family's template is
included into needle_kernels.c after templates/kernels/_reference.c.j2, whose `_scalar`
reference functions it may call, and defines the `REQUIRED` functions; each `OPTIONAL` one it
defines only when its row says so, and the engine uses the symbol's generic fallback
otherwise.  host_tests/test_families.py renders every family and holds it to this.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.errors import CactError

#: How a family batches a prefill product (docs/benchmarks.md).
GEMM_FORMS = ("family", "blocked")
#: needle_kernels.h's int8 dot of the attention scores (nk_dot_i8n): the generic loop, which
#: compilers vectorise where the length is a constant, or a shared implementation.
DOT_I8N = ("loop", "smlad", "helium", "family")
#: needle_kernels.h's weighted sum of int8 values: the generic nk_mac_i8n (one position at a
#: time, a loop compilers vectorise) or a shared nk_ws_i8n over runs of positions.
WEIGHTED_SUM = ("loop", "blocked", "avx2", "helium", "family")


@dataclass(frozen=True)
class Symbol:
    """One function (or macro) of the contract between the engine and a family's template."""

    name: str
    summary: str
    fallback: str = ""            # what the engine uses when the family does not define it


#: Every family's template defines these (the portable family's are the reference's fast forms).
REQUIRED = (
    Symbol("nk_a8_quantize", "rotate each 128-group of an activation and quantise it to int8"),
    Symbol("nk_gemv_a8", "the A8 product of a block of rows with one quantised activation"),
)
#: A family may define these; its row says whether it does (`KernelFamily.defines`).
OPTIONAL = (
    Symbol("nk_gemm_a8_family", "the batched A8 product of a prompt pass, each row's group decoded "
           "once (gemm_form \"family\")",
           "nk_gemm_a8_blocked: the family's nk_gemv_a8 over row blocks that stay in L1 "
           "(gemm_form \"blocked\")"),
    Symbol("nk_columns8", "eight decoded key rows as the columns of a block, with the macro "
           "NK_HAVE_COLUMNS8 (key_columns)",
           "decode attention decodes the keys straight into the columns, a strided store a value"),
    Symbol("nk_fwht", "the unnormalised butterfly of a group (own_fwht)",
           "needle_kernels.c's butterflies: radix-8 passes, or the soft-float runtime's"),
    Symbol("nk_dot_i8n_family", "the attention scores' int8 group dot (dot_i8n \"family\": code the "
           "model cannot inline, e.g. built for another target)",
           "needle_kernels.h's nk_dot_i8n: the plain loop or a shared form (dot_i8n)"),
    Symbol("nk_ws_i8n_family", "the weighted sum of int8 values over a run of positions "
           "(weighted_sum \"family\")",
           "needle_kernels.h's nk_ws_i8n or nk_mac_i8n (weighted_sum)"),
)


@dataclass(frozen=True)
class KernelFamily:
    """One kernel family: its template, what it needs to build and run, and how the engine
    uses it.  The defaults are the portable choices: a new family states only what differs."""

    name: str
    template: str                       # under templates/: the family's code for needle_kernels.c
    summary: str                        # what it is for, in a few words
    #: the instruction set its intrinsics are written for (None: portable, any board).  Another
    #: architecture's family would fail in the compiler (arm_neon.h missing, -mavx2 unknown), so
    #: kernels= and emit --kernels refuse it first (boards.kernels_refusal); finer needs within
    #: one architecture (DSP, dotprod, Helium, AVX2) stop with the template's own #error
    arch: str | None = None
    compile_flags: tuple[str, ...] = () # beyond the board's arch_flags (the host board's are empty)
    #: /proc/cpuinfo flags an x86-64 build machine needs to run it: the host board's `auto`
    #: pick and the refusal of run=/bench= on a machine without them (slowest family first)
    host_features: tuple[str, ...] = ()
    dot_product: bool = False           # the ISA's int8 dot-product extension (VPDPBUSD, SDOT)
    #: how nk_gemm_a8 batches a prefill product: "family", the family's own nk_gemm_a8_family
    #: (each row's group decoded once into the family's level form, then only multiply-
    #: accumulates per token), or "blocked", the fallback: its GEMV over row blocks that stay
    #: in L1 while every token passes
    gemm_form: str = "blocked"
    #: positions decode attention scores side by side: eight independent sums where the cores
    #: run several float adds at once and the compiler vectorises the lanes; one (nk_dot's plain
    #: loop) on the in-order cores, where the keys' column layout only adds instructions
    attention_lanes: int = 1
    #: its compiler vectorises f32 loops with IEEE subnormals (AVX2, AArch64 NEON): the softmax
    #: takes its exponentials eight at a time (nk_exp_select) and the butterflies go eight wide.
    #: Not AArch32 NEON (it flushes subnormals, so GCC leaves f32 loops scalar) nor the in-order
    #: and FPU-less cores, where the branch-free forms only add instructions
    vector_float: bool = False
    #: decode attention decodes a block's keys as rows and turns them into columns with its
    #: nk_columns8 (a CQ-coded cache only): with decoding straight into the columns the keys
    #: cost more than the weights' GEMV on the host at 200 positions, while on rpi-zero2 the
    #: rows and a transposition added 17 % per decoded token of the demo
    key_columns: bool = False
    #: decode attention prefetches the KV codes and scales ahead of their use: measured on the
    #: host only, where the cache of needle2-base outgrows L2; instruction counts under
    #: emulation cannot show a prefetch's worth, so the other families wait for a device
    kv_prefetch: bool = False
    fp16_convert: bool = False          # the FPU converts binary16 to binary32 (VCVTB, __fp16)
    dot_i8n: str = "loop"               # needle_kernels.h's nk_dot_i8n (DOT_I8N)
    weighted_sum: str = "loop"          # needle_kernels.h's weighted sum (WEIGHTED_SUM)
    own_fwht: bool = False              # defines nk_fwht itself

    def __post_init__(self):
        for trait, value, allowed in (("gemm_form", self.gemm_form, GEMM_FORMS),
                                      ("dot_i8n", self.dot_i8n, DOT_I8N),
                                      ("weighted_sum", self.weighted_sum, WEIGHTED_SUM)):
            if value not in allowed:
                raise ValueError(f"kernel family {self.name}: {trait} {value!r} is not one of {allowed}")
        if self.weighted_sum == "helium" and self.dot_i8n != "helium":
            raise ValueError(f"kernel family {self.name}: the Helium weighted sum comes with the Helium dot")
        if self.attention_lanes not in (1, 8):
            raise ValueError(f"kernel family {self.name}: attention_lanes is 1 or 8")

    @property
    def defines(self) -> frozenset[str]:
        """The contract's functions its template defines."""
        own = {"nk_gemm_a8_family": self.gemm_form == "family", "nk_columns8": self.key_columns,
               "nk_fwht": self.own_fwht, "nk_dot_i8n_family": self.dot_i8n == "family",
               "nk_ws_i8n_family": self.weighted_sum == "family"}
        return frozenset([s.name for s in REQUIRED] + [name for name, yes in own.items() if yes])


# x86-vnni keeps the compiler's vectors at 256 bits, the width its kernels are written for:
# AVX-512 is enabled for VPDPBUSD on ymm registers, not for zmm code.
_X86_VNNI = ("-mavx2", "-mavx512vnni", "-mavx512vl", "-mprefer-vector-width=256")

#: Every kernel family, by name.
FAMILIES: dict[str, KernelFamily] = {f.name: f for f in (
    KernelFamily("scalar", "kernels/scalar.c.j2", "portable C: any board, and the reference",
                 gemm_form="family", weighted_sum="blocked"),
    KernelFamily("armv6", "kernels/armv6.c.j2", "ARMv6 media instructions (SMLAD) on VFPv2",
                 arch="32-bit Arm (A profile)", gemm_form="family", attention_lanes=8,
                 dot_i8n="smlad", weighted_sum="blocked"),
    KernelFamily("neon32", "kernels/neon32.c.j2", "AArch32 Advanced SIMD",
                 arch="32-bit Arm (A profile)", gemm_form="family", attention_lanes=8),
    KernelFamily("neon64", "kernels/neon64.c.j2", "AArch64 Advanced SIMD",
                 arch="aarch64", gemm_form="family", attention_lanes=8, vector_float=True),
    KernelFamily("neon64-dot", "kernels/neon64.c.j2", "AArch64 with ARMv8.2 dotprod (SDOT)",
                 arch="aarch64", dot_product=True, gemm_form="family", attention_lanes=8,
                 vector_float=True),
    KernelFamily("mdsp", "kernels/mdsp.c.j2", "Cortex-M with the DSP extension (SMLAD)",
                 arch="Arm Cortex-M", gemm_form="family", fp16_convert=True, dot_i8n="smlad",
                 weighted_sum="blocked"),
    KernelFamily("mve", "kernels/mve.c.j2", "Cortex-M with Helium (MVE)",
                 arch="Arm Cortex-M", fp16_convert=True, dot_i8n="helium", weighted_sum="helium",
                 own_fwht=True),
    KernelFamily("rvv", "kernels/rvv.c.j2", "RISC-V Vector 1.0, any VLEN from 128 (VWMUL + VWREDSUM dots)",
                 arch="riscv64", dot_i8n="family", weighted_sum="family", own_fwht=True),
    KernelFamily("x86", "kernels/x86.c.j2", "x86-64 with AVX2",
                 arch="x86-64", compile_flags=("-mavx2",), host_features=("avx2",),
                 gemm_form="family", attention_lanes=8, vector_float=True, key_columns=True,
                 kv_prefetch=True, weighted_sum="avx2"),
    KernelFamily("x86-vnni", "kernels/x86.c.j2", "x86-64 with AVX512-VNNI (VPDPBUSD) on 256 bits",
                 arch="x86-64", compile_flags=_X86_VNNI, host_features=("avx2", "avx512_vnni", "avx512vl"),
                 dot_product=True, gemm_form="family", attention_lanes=8, vector_float=True,
                 key_columns=True, kv_prefetch=True, weighted_sum="avx2"),
)}


def names() -> list[str]:
    """Every family's name, sorted."""
    return sorted(FAMILIES)


def get(name: str) -> KernelFamily:
    """The family called `name`, or CactError naming the families there are."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise CactError(f"kernel family {name!r}: choose one of {', '.join(names())}") from None
