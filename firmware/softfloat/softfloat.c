/* IEEE 754 binary32 add, subtract and multiply for cores without an FPU (the MIPS routers).
 *
 * Built soft-float, every float operation of the engine is a call into the compiler's runtime
 * (libgcc or, under zig cc, compiler-rt): __addsf3, __subsf3, __mulsf3.  Those are generic
 * (any format, any rounding mode, exception flags) and cost 45 to 60 instructions a call on
 * a MIPS32 24Kc; they were two thirds of a soft-float token.  These definitions take their
 * place at link time (the runtime's own are weak, or archive members the linker no longer
 * needs) and give the same bits: round to nearest, ties to even, gradual underflow,
 * infinities, x - x = +0, and a quiet NaN for every invalid operation.  Nothing else of
 * IEEE 754 is used by the engine (no other rounding mode, no exception flags), so nothing
 * else is kept.  A NaN result is the quieted NaN operand, or 0x7fc00000 when both operands
 * are numbers (inf - inf, 0 * inf); NaN payloads are not part of the engine's numerics.
 *
 * Representation: a magnitude's significand with its implicit bit goes to a 32-bit word with
 * guard bits below it; bits shifted out during alignment are ORed into bit 0 (sticky), which
 * is enough for one correct rounding at the end.  A result is assembled as
 * ((e - 1) << 23) + significand, so a significand without its top bit (a subnormal, e = 1)
 * encodes itself, and a rounding carry moves into the exponent by itself, up to infinity.
 *
 * host_tests/test_softfloat.py checks every operation against the host's hardware floats on
 * millions of operand pairs (specials, subnormals, cancellation, ties), natively with
 * NK_SOFTFLOAT_PREFIX names and cross-built for both MIPS routers under QEMU. */

#include <stdint.h>
#include <string.h>

#ifdef NK_SOFTFLOAT_PREFIX          /* the host test: callable names, not the runtime's */
#define NK_SF_ADD nk_sf_add
#define NK_SF_SUB nk_sf_sub
#define NK_SF_MUL nk_sf_mul
#define NK_SF_DIV nk_sf_div
#else
#define NK_SF_ADD __addsf3
#define NK_SF_SUB __subsf3
#define NK_SF_MUL __mulsf3
#define NK_SF_DIV __divsf3
#endif

float NK_SF_ADD(float a, float b);
float NK_SF_SUB(float a, float b);
float NK_SF_MUL(float a, float b);
float NK_SF_DIV(float a, float b);
void needle_sf_butterfly(float *x, float *y);   /* the engine's butterflies (needle_kernels.c) */
void needle_sf_add_scaled(float *o, float w, const float *v, uint32_t n);  /* lane mixing (needle_model.c) */
float needle_sf_dot(const float *a, const float *b, uint32_t n, float acc); /* sums of products */
float needle_sf_group_step(float acc, float norm, float g, int32_t dot);  /* a GEMV group (kernels) */

#define SF_SIGN 0x80000000u
#define SF_ABS 0x7fffffffu
#define SF_INF 0x7f800000u
#define SF_QUIET 0x00400000u        /* the quiet bit of a NaN */
#define SF_DEFAULT_NAN 0x7fc00000u
#define SF_FRAC 0x007fffffu
#define SF_HIDDEN 0x00800000u

static inline uint32_t sf_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float sf_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* m >> n with the bits shifted out ORed into bit 0; 1 <= n, any n. */
static inline uint32_t sf_shift_sticky(uint32_t m, uint32_t n)
{
    return n < 32u ? (m >> n) | ((m << (32u - n)) != 0u) : (m != 0u);
}

/* A finite nonzero magnitude's significand with its leading one at bit 23, and its exponent:
 * a subnormal's is normalised, with an exponent of 1 or below. */
static inline __attribute__((always_inline)) uint32_t sf_significand(uint32_t abs, int32_t *e)
{
    const uint32_t m = abs & SF_FRAC;
    if (abs >> 23) {
        *e = (int32_t)(abs >> 23);
        return m | SF_HIDDEN;
    }
    const uint32_t s = (uint32_t)__builtin_clz(m) - 8u;
    *e = 1 - (int32_t)s;
    return m << s;
}

/* a + b on the bit patterns with |a| >= |b|, every case: zeros, subnormals, infinities, NaN.  The
 * significands carry 7 guard bits (bits 30..7 hold the 24 significant ones): alignment loses
 * bits only when the exponents differ by two or more, and then a difference needs at most
 * one normalising shift, so the guard bits and the sticky bit decide the rounding exactly. */
static inline __attribute__((always_inline)) uint32_t sf_add_general(uint32_t a, uint32_t b)
{
    uint32_t aa = a & SF_ABS, bb = b & SF_ABS;  /* |a| >= |b| (sf_add orders them; NaN above infinity) */
    if (aa >= SF_INF) {                     /* a is infinite or NaN */
        if (aa > SF_INF)
            return a | SF_QUIET;
        return (bb == SF_INF && ((a ^ b) & SF_SIGN)) ? SF_DEFAULT_NAN : a;
    }
    if (bb == 0u)                           /* x + 0 = x; the zeros: -0 only from -0 + -0 */
        return aa == 0u ? (a & b) : a;

    uint32_t ea = aa >> 23, eb = bb >> 23;
    uint32_t ma = (aa & SF_FRAC) << 7, mb = (bb & SF_FRAC) << 7;
    if (ea) ma |= SF_HIDDEN << 7; else ea = 1u;        /* a subnormal has exponent 1 */
    if (eb) mb |= SF_HIDDEN << 7; else eb = 1u;
    if (ea != eb)
        mb = sf_shift_sticky(mb, ea - eb);

    uint32_t m, e = ea;
    if ((a ^ b) & SF_SIGN) {                /* magnitudes subtract: exact, then normalise */
        m = ma - mb;
        if (m == 0u)
            return 0u;                      /* x - x = +0 */
        uint32_t s = (uint32_t)__builtin_clz(m) - 1u;
        if (s >= e)
            s = e - 1u;                     /* down to exponent 1: a subnormal result */
        m <<= s;
        e -= s;
    } else {                                /* magnitudes add: at most one carry */
        m = ma + mb;
        if (m >> 31) {
            m = (m >> 1) | (m & 1u);
            e++;
        }
    }
    if (e >= 255u)
        return (a & SF_SIGN) | SF_INF;
    uint32_t keep = m >> 7, rest = m & 0x7fu;
    /* nearest, ties to even: up when rest > half, or rest = half and keep is odd */
    return (a & SF_SIGN) | (((e - 1u) << 23) + keep + ((rest + (keep & 1u)) > 0x40u));
}

/* a * b on the bit patterns, every case: the 24 x 24-bit significand product, taken as the
 * high word of (ma << 8)(mb << 8) with the low word's bits as sticky. */
static inline __attribute__((always_inline)) uint32_t sf_mul_general(uint32_t a, uint32_t b)
{
    uint32_t sign = (a ^ b) & SF_SIGN;
    uint32_t aa = a & SF_ABS, bb = b & SF_ABS;
    if (aa >= SF_INF || bb >= SF_INF) {
        if (aa > SF_INF)
            return a | SF_QUIET;
        if (bb > SF_INF)
            return b | SF_QUIET;
        if (aa == 0u || bb == 0u)
            return SF_DEFAULT_NAN;          /* 0 * inf */
        return sign | SF_INF;
    }
    if (aa == 0u || bb == 0u)
        return sign;

    int32_t ea, eb;
    uint32_t ma = sf_significand(aa, &ea), mb = sf_significand(bb, &eb);
    uint64_t p = (uint64_t)(ma << 8) * (uint64_t)(mb << 8);    /* in [2^62, 2^64) */
    uint32_t hi = (uint32_t)(p >> 32), lo = (uint32_t)p;
    int32_t e = ea + eb - 127;
    if (hi >> 31) {
        e++;
    } else {
        hi = (hi << 1) | (lo >> 31);
        lo <<= 1;
    }
    uint32_t m = hi | (lo != 0u);           /* bits 31..8 significant, 7..0 guard and sticky */
    if (e >= 255)
        return sign | SF_INF;
    if (e <= 0) {                           /* below the normal range: denormalise, round once */
        m = sf_shift_sticky(m, (uint32_t)(1 - e));
        e = 1;
    }
    uint32_t keep = m >> 8, rest = m & 0xffu;
    return sign | ((((uint32_t)e - 1u) << 23) + keep + ((rest + (keep & 1u)) > 0x80u));
}

/* The common case first, inline in each entry point: both operands normal, a normal
 * result.  Anything else (a zero, subnormal, infinite or NaN operand, a subnormal result,
 * overflow of a product) goes to the general function, which starts again from the bits.
 * Rounding to nearest even in one addition: m + (half - 1) + (the kept part's last bit)
 * carries into the kept part exactly when the rest is above half, or half with an odd
 * kept part. */
static inline __attribute__((always_inline)) uint32_t sf_add(uint32_t a, uint32_t b)
{
    uint32_t aa = a & SF_ABS, bb = b & SF_ABS;
    if (aa < bb) {                          /* |a| >= |b| from here */
        uint32_t t = a;
        a = b;
        b = t;
        t = aa;
        aa = bb;
        bb = t;
    }
    uint32_t ea = aa >> 23, eb = bb >> 23;
    if (ea >= 255u || eb == 0u)             /* |a| infinite or NaN; b zero or subnormal */
        return sf_add_general(a, b);
    /* the significands with their implicit bit at bit 30, 7 guard bits below */
    uint32_t ma = ((aa << 8) | SF_SIGN) >> 1, mb = ((bb << 8) | SF_SIGN) >> 1;
    uint32_t d = ea - eb;
    if (d > 7u) {                           /* beyond the guard bits: keep a sticky bit */
        if (d > 31u)
            d = 31u;
        mb = (mb >> d) | ((mb << (32u - d)) != 0u);
    } else {
        mb >>= d;
    }
    uint32_t m, e = ea;
    if ((a ^ b) & SF_SIGN) {
        m = ma - mb;
        if (m == 0u)
            return 0u;                      /* x - x = +0 */
        uint32_t s = (uint32_t)__builtin_clz(m) - 1u;
        if (s >= e)                         /* a subnormal result */
            return sf_add_general(a, b);
        m <<= s;
        e -= s;
    } else {
        m = ma + mb;
        uint32_t c = m >> 31;               /* a carry: one place right, keeping the sticky bit */
        m = (m >> c) | (m & c);
        e += c;
        if (e >= 255u)
            return (a & SF_SIGN) | SF_INF;
    }
    m += 0x3fu + ((m >> 7) & 1u);
    return (a & SF_SIGN) | (((e - 1u) << 23) + (m >> 7));
}

static inline __attribute__((always_inline)) uint32_t sf_mul(uint32_t a, uint32_t b)
{
    uint32_t ea = (a >> 23) & 0xffu, eb = (b >> 23) & 0xffu;
    if (ea - 1u >= 254u || eb - 1u >= 254u)     /* a zero, subnormal, infinity or NaN */
        return sf_mul_general(a, b);
    /* significands in [2^31, 2^32): the product in [2^62, 2^64), its high word's top bit at
     * 31 (a product of 2 or more: one more in the exponent, one place right) or 30 */
    uint64_t p = (uint64_t)((a << 8) | SF_SIGN) * (uint64_t)((b << 8) | SF_SIGN);
    uint32_t hi = (uint32_t)(p >> 32), lo = (uint32_t)p;
    uint32_t c = hi >> 31;
    uint32_t e = ea + eb - 127u + c;        /* biased; wraps below 0 */
    if (e - 1u >= 254u)                     /* overflow, or a subnormal or zero result */
        return sf_mul_general(a, b);
    hi = (hi >> c) | (hi & c) | (lo != 0u);
    uint32_t m = hi;                        /* implicit bit at bit 30, 7 guard bits, sticky */
    m += 0x3fu + ((m >> 7) & 1u);
    return ((a ^ b) & SF_SIGN) | (((e - 1u) << 23) + (m >> 7));
}

/* a / b on the bit patterns, every case.  The quotient of the significands (a subnormal's
 * normalised first) is taken bit by bit: only the cases sf_div leaves here come this way. */
static __attribute__((noinline)) uint32_t sf_div_general(uint32_t a, uint32_t b)
{
    const uint32_t sign = (a ^ b) & SF_SIGN;
    const uint32_t aa = a & SF_ABS, bb = b & SF_ABS;
    if (aa > SF_INF)
        return a | SF_QUIET;
    if (bb > SF_INF)
        return b | SF_QUIET;
    if (aa == SF_INF)
        return bb == SF_INF ? SF_DEFAULT_NAN : sign | SF_INF;
    if (bb == SF_INF)
        return sign;                        /* finite / inf = 0 */
    if (bb == 0u)
        return aa == 0u ? SF_DEFAULT_NAN : sign | SF_INF;
    if (aa == 0u)
        return sign;

    int32_t ea, eb;
    uint32_t ma = sf_significand(aa, &ea), mb = sf_significand(bb, &eb);
    int32_t e = ea - eb + 127;
    if (ma < mb) {                          /* the quotient in [1, 2) */
        ma <<= 1;
        e--;
    }
    /* q = floor(ma 2^24 / mb) in [2^24, 2^25): 24 significant bits and the round bit */
    uint32_t q = 0u, r = ma;
    for (int i = 0; i < 25; i++) {
        const uint32_t bit = r >= mb;
        r -= bit ? mb : 0u;
        q = (q << 1) | bit;
        r <<= 1;
    }
    uint32_t m = (q << 6) | (r != 0u);      /* sf_add's form: the leading one at bit 30, 7
                                             * guard bits (the round bit at 6), sticky */
    if (e >= 255)
        return sign | SF_INF;
    if (e <= 0) {                           /* below the normal range: denormalise, round once */
        m = sf_shift_sticky(m, (uint32_t)(1 - e));
        e = 1;
    }
    m += 0x3fu + ((m >> 7) & 1u);
    return sign | ((((uint32_t)e - 1u) << 23) + (m >> 7));
}

/* 2^22 / (64.5 + i), rounded, i < 64: 2^15 / D for the middle of each of the 64 intervals of
 * a divisor's significand D in [1/2, 1) (its 6 bits after the leading one), within 2^-7. */
static const uint16_t sf_recip_seed[64] = {
    65028, 64035, 63072, 62138, 61231, 60350, 59494, 58662, 57852, 57065, 56299, 55554,
    54828, 54120, 53431, 52759, 52103, 51464, 50840, 50231, 49637, 49056, 48489, 47935,
    47393, 46864, 46346, 45839, 45344, 44859, 44384, 43919, 43464, 43019, 42582, 42154,
    41734, 41323, 40920, 40525, 40137, 39756, 39383, 39017, 38657, 38304, 37958, 37617,
    37283, 36954, 36631, 36314, 36003, 35696, 35395, 35099, 34808, 34521, 34239, 33962,
    33689, 33421, 33157, 32897
};

/* a / b with both operands normal and a normal result; anything else to sf_div_general.
 * The reciprocal of the divisor's significand D = mb 2^-24 in [1/2, 1): x = 2^31 / D to
 * within about 2^-28, from the seed table and two Newton steps x (2 - D x) in 32-bit fixed
 * point (from below after the first step, so x stays under 2^32).  The quotient estimate
 * ma x 2^-31 is then within 2 of q = floor(ma 2^24 / mb), and the remainder ma 2^24 - q mb,
 * exact in 32 bits (two's complement: it is under 2^26 in magnitude), corrects it to q: the
 * result is exactly rounded whatever the estimate's error, which only costs a loop turn. */
static inline __attribute__((always_inline)) uint32_t sf_div(uint32_t a, uint32_t b)
{
    const uint32_t ea = (a >> 23) & 0xffu, eb = (b >> 23) & 0xffu;
    if (ea - 1u >= 254u || eb - 1u >= 254u)     /* a zero, subnormal, infinity or NaN */
        return sf_div_general(a, b);
    uint32_t ma = (a & SF_FRAC) | SF_HIDDEN;
    const uint32_t mb = (b & SF_FRAC) | SF_HIDDEN;
    uint32_t e = ea - eb + 127u;            /* biased; wraps below 0 */
    if (ma < mb) {                          /* the quotient in [1, 2) */
        ma <<= 1;
        e--;
    }
    if (e - 1u >= 254u)                     /* overflow, or a subnormal or zero result */
        return sf_div_general(a, b);
    const uint32_t d = mb << 8;             /* D 2^32 */
    uint32_t x = (uint32_t)sf_recip_seed[(d >> 25) & 63u] << 16;
    for (int i = 0; i < 2; i++) {
        const uint32_t t = (uint32_t)(((uint64_t)d * x) >> 32);           /* D x, 2^31 = 1 */
        x = (uint32_t)(((uint64_t)x * (0u - t)) >> 31);                 /* x (2 - D x) */
    }
    uint32_t q = (uint32_t)(((uint64_t)ma * x) >> 31);
    int32_t r = (int32_t)((ma << 24) - q * mb);
    while (r < 0) {
        q--;
        r += (int32_t)mb;
    }
    while (r >= (int32_t)mb) {
        q++;
        r -= (int32_t)mb;
    }
    const uint32_t up = q & 1u & ((r != 0) | (q >> 1));
    return ((a ^ b) & SF_SIGN) | (((e - 1u) << 23) + (q >> 1) + up);
}

float NK_SF_ADD(float a, float b)
{
    return sf_float(sf_add(sf_bits(a), sf_bits(b)));
}

float NK_SF_SUB(float a, float b)
{
    return sf_float(sf_add(sf_bits(a), sf_bits(b) ^ SF_SIGN));
}

float NK_SF_MUL(float a, float b)
{
    return sf_float(sf_mul(sf_bits(a), sf_bits(b)));
}

float NK_SF_DIV(float a, float b)
{
    return sf_float(sf_div(sf_bits(a), sf_bits(b)));
}

/* *x, *y = *x + *y, *x - *y: a butterfly of the engine's Hadamard transforms, where the soft-float
 * runtime's add and subtract were a quarter of a router's token.  Both results are those of
 * sf_add, with the operands unpacked, ordered and aligned once: the two share |a| and |b|, and
 * one of them adds the magnitudes while the other subtracts them (a + b adds them when the
 * signs agree, a - b when they differ).  Each takes the sign of the larger operand, which is
 * -b for the difference when |b| > |a|; a zero difference of magnitudes is +0.  Anything off
 * sf_add's fast path (an infinite or NaN operand, a zero or subnormal one, a subnormal
 * result) goes to sf_add itself, out of line so that the common path keeps to registers. */
static __attribute__((noinline)) void sf_butterfly_general(float *x, float *y, uint32_t a, uint32_t b)
{
    *x = sf_float(sf_add(a, b));
    *y = sf_float(sf_add(a, b ^ SF_SIGN));
}

void needle_sf_butterfly(float *x, float *y)
{
    const uint32_t a = sf_bits(*x), b = sf_bits(*y);
    uint32_t aa = a & SF_ABS, bb = b & SF_ABS;
    uint32_t s_sum = a & SF_SIGN, s_diff = a & SF_SIGN;    /* signs when |a| >= |b| */
    if (aa < bb) {
        const uint32_t t = aa;
        aa = bb;
        bb = t;
        s_sum = b & SF_SIGN;
        s_diff = (b & SF_SIGN) ^ SF_SIGN;
    }
    const uint32_t ea = aa >> 23, eb = bb >> 23;
    if (ea >= 255u || eb == 0u) {
        sf_butterfly_general(x, y, a, b);
        return;
    }
    const uint32_t ma = ((aa << 8) | SF_SIGN) >> 1;          /* implicit bit at 30, 7 guard bits */
    uint32_t mb = ((bb << 8) | SF_SIGN) >> 1, d = ea - eb;
    if (d > 7u) {
        if (d > 31u)
            d = 31u;
        mb = (mb >> d) | ((mb << (32u - d)) != 0u);
    } else {
        mb >>= d;
    }

    uint32_t r_sub = 0u;                                /* ||a| - |b||: +0 when they are equal */
    uint32_t m = ma - mb;
    if (m != 0u) {
        const uint32_t sh = (uint32_t)__builtin_clz(m) - 1u;
        if (sh >= ea) {                                 /* a subnormal result */
            sf_butterfly_general(x, y, a, b);
            return;
        }
        m <<= sh;
        m += 0x3fu + ((m >> 7) & 1u);
        r_sub = ((ea - sh - 1u) << 23) + (m >> 7);
    }
    m = ma + mb;                                        /* |a| + |b|: at most one carry */
    const uint32_t c = m >> 31, e = ea + c;
    m = (m >> c) | (m & c);
    m += 0x3fu + ((m >> 7) & 1u);
    const uint32_t r_add = e >= 255u ? SF_INF : ((e - 1u) << 23) + (m >> 7);

    const int same = !((a ^ b) & SF_SIGN);
    const uint32_t sum = same ? r_add : r_sub, diff = same ? r_sub : r_add;
    *x = sf_float(sum ? sum | s_sum : 0u);
    *y = sf_float(diff ? diff | s_diff : 0u);
}

/* o[i] = o[i] + w * v[i] for i < n, and acc + a[0] b[0] + a[1] b[1] + ... in that order: the
 * engine's lane mixing and its sums of squares and dot products, a tenth and a twentieth of a
 * router's token as separate calls.  Each step is sf_mul then sf_add, the two roundings of
 * `o + w * v` (the engine builds with -ffp-contract=off: never a fused multiply-add), inline
 * in one loop: no call per operation, and the product goes from one to the other in a
 * register. */
void needle_sf_add_scaled(float *o, float w, const float *v, uint32_t n)
{
    const uint32_t wb = sf_bits(w);
    for (uint32_t i = 0; i < n; i++)
        o[i] = sf_float(sf_add(sf_bits(o[i]), sf_mul(wb, sf_bits(v[i]))));
}

float needle_sf_dot(const float *a, const float *b, uint32_t n, float acc)
{
    uint32_t s = sf_bits(acc);
    for (uint32_t i = 0; i < n; i++)
        s = sf_add(s, sf_mul(sf_bits(a[i]), sf_bits(b[i])));
    return sf_float(s);
}

/* (float)v, rounded to nearest even above 2^24, as the runtime's __floatsisf gives it */
static inline __attribute__((always_inline)) uint32_t sf_from_i32(int32_t v)
{
    if (v == 0)
        return 0u;
    const uint32_t sign = v < 0 ? SF_SIGN : 0u;
    const uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    const uint32_t n = (uint32_t)__builtin_clz(u);
    uint32_t m = (u << n) >> 1;             /* the leading one at bit 30, 7 guard bits (a
                                             * magnitude of at most 2^31 loses no bit) */
    m += 0x3fu + ((m >> 7) & 1u);
    return sign | (((157u - n) << 23) + (m >> 7));
}

/* acc + (norm g) (float)dot: one group of a 4-, 3- or 2-bit GEMV row (the scalar kernels'
 * `coef = norm * G[j]; acc = acc + coef * (float)dot`), the conversion and the three
 * operations each rounded as on their own, in one call instead of four. */
float needle_sf_group_step(float acc, float norm, float g, int32_t dot)
{
    const uint32_t coef = sf_mul(sf_bits(norm), sf_bits(g));
    return sf_float(sf_add(sf_bits(acc), sf_mul(coef, sf_from_i32(dot))));
}
