/* A decode step's per-token work, and RMSNorm's forward and backward, in bf16, fused: each function is one pass where
 * eager torch runs several operations, rounding to bf16 where eager's operations round (its sums run in another
 * order: fp32 rounding). For CPUs with AVX-512 (F, BW, VL); built and loaded by grpo.policy.kernels. bf16 is held as
 * uint16_t. */

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "these kernels need AVX-512 F, BW and VL"
#endif

typedef uint16_t bf16;

/* The lanes of a 16-wide chunk that hold elements, `left` of them left. */
static inline __mmask16 lanes(long left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

static inline __m512 load(const bf16 *p, __mmask16 m) {
    __m256i half = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* To bf16 by round to nearest even, as torch converts (a NaN stays a quiet NaN): the upper 16 bits of each lane. */
static inline __m512i rounded_bits(__m512 x) {
    __m512i bits = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
}

static inline void store(bf16 *p, __m512 x, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(rounded_bits(x))); }

/* x rounded to bf16, kept in fp32: where eager's operation would have written a bf16 tensor. */
static inline __m512 round_bf16(__m512 x) { return _mm512_castsi512_ps(_mm512_slli_epi32(rounded_bits(x), 16)); }

/* e^x to about 2 ulp: x = n ln2 + r, e^r by its Taylor polynomial to r^7 (|r| <= ln2 / 2), times 2^n (scalef: right
 * into the subnormal range, 0 below it, infinity above fp32's). */
static inline __m512 exp_ps(__m512 x) {
    __m512 clamped = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), clamped);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* residual [rows, hidden] <- residual + delta (skipped where delta is NULL); out = weight * bf16(x * rsqrt(mean(x^2)
 * + eps)), x the residual in fp32: transformers' Llama RMSNorm after the residual add. */
void add_rms_norm(int rows, int hidden, bf16 *residual, const bf16 *delta, const bf16 *weight, float eps, bf16 *out) {
#pragma omp parallel for if (rows >= 8) schedule(static)
    for (int r = 0; r < rows; r++) {
        bf16 *x = residual + (long)r * hidden, *y = out + (long)r * hidden;
        const bf16 *d = delta ? delta + (long)r * hidden : NULL;
        __m512 squares = _mm512_setzero_ps();
        for (int i = 0; i < hidden; i += 16) {
            __mmask16 m = lanes(hidden - i);
            __m512 v = load(x + i, m);
            if (d) {
                v = round_bf16(_mm512_add_ps(v, load(d + i, m)));
                store(x + i, v, m);
            }
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        __m512 scale = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(squares) / hidden + eps));
        for (int i = 0; i < hidden; i += 16) {
            __mmask16 m = lanes(hidden - i);
            store(y + i, _mm512_mul_ps(load(weight + i, m), round_bf16(_mm512_mul_ps(load(x + i, m), scale))), m);
        }
    }
}

/* qkv [rows, heads + 2 kv_heads, dim]: rotary embedding on the query and key heads in place,
 * x <- bf16(bf16(x cos) + bf16(cat(x2, x1) sin_signed)), cos and sin_signed [rows, dim]; then the (rotated) keys
 * and the values written at `position` of the buffers [rows, kv_heads, capacity, dim] (a row `buffer_row` apart). */
void rope_store(int rows, int heads, int kv_heads, int dim, bf16 *qkv, const bf16 *cos, const bf16 *sin_signed,
                bf16 *key_buffer, bf16 *value_buffer, long buffer_row, int capacity, int position) {
    int half = dim / 2, rotated = heads + kv_heads, all = heads + 2 * kv_heads;
#pragma omp parallel for if (rows >= 8) schedule(static)
    for (int r = 0; r < rows; r++) {
        const bf16 *c = cos + (long)r * dim, *s = sin_signed + (long)r * dim;
        for (int h = 0; h < rotated; h++) {
            bf16 *x = qkv + ((long)r * all + h) * dim;
            for (int i = 0; i < half; i += 16) {
                __mmask16 m = lanes(half - i);
                __m512 x1 = load(x + i, m), x2 = load(x + half + i, m);
                __m512 first = _mm512_add_ps(round_bf16(_mm512_mul_ps(x1, load(c + i, m))),
                                             round_bf16(_mm512_mul_ps(x2, load(s + i, m))));
                __m512 second = _mm512_add_ps(round_bf16(_mm512_mul_ps(x2, load(c + half + i, m))),
                                              round_bf16(_mm512_mul_ps(x1, load(s + half + i, m))));
                store(x + i, first, m);
                store(x + half + i, second, m);
            }
        }
        for (int h = 0; h < kv_heads; h++) {
            long at = r * buffer_row + ((long)h * capacity + position) * dim;
            memcpy(key_buffer + at, qkv + ((long)r * all + heads + h) * dim, dim * sizeof(bf16));
            memcpy(value_buffer + at, qkv + ((long)r * all + rotated + h) * dim, dim * sizeof(bf16));
        }
    }
}

/* The sums of four vectors' lanes: [sum a, sum b, sum c, sum d]. */
static inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  /* a0+a2 b0+b2 a1+a3 b1+b3 per 128 */
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xee));  /* a b c d per 128 */
    __m256 halves = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
    return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

/* One (row, key-value head) of `decode_attention`: `groups` query heads of 16 x `chunks` dims (constants where its
 * caller inlines it, so that the accumulators stay in registers), query [groups * chunks] vectors, the scores and
 * then the weights in weights [groups, length], out [groups, dim]. */
static inline __attribute__((always_inline)) void attend(int groups, int chunks, int length, const __m512 *query,
                                                             const bf16 *keys, const bf16 *values,
                                                             const uint8_t *allowed, float scaling, float *weights,
                                                             bf16 *out) {
    for (int j = 0; j < length; j += 4) {
        __m512 k[4][8];
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < chunks; c++)
                k[p][c] = load(keys + (long)(j + p) * chunks * 16 + c * 16, j + p < length ? 0xffff : 0);
        for (int g = 0; g < groups; g++) {
            __m512 dot[4];
            for (int p = 0; p < 4; p++) {
                dot[p] = _mm512_mul_ps(query[g * chunks], k[p][0]);
                for (int c = 1; c < chunks; c++) dot[p] = _mm512_fmadd_ps(query[g * chunks + c], k[p][c], dot[p]);
            }
            __m128 scores = sum4(dot[0], dot[1], dot[2], dot[3]);
            _mm_mask_storeu_ps(weights + g * length + j, (__mmask8)lanes(length - j) & 0xf, scores);
        }
    }
    for (int g = 0; g < groups; g++) {
        float *w = weights + g * length;
        __m512 top = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < length; j += 16) {
            __mmask16 m = lanes(length - j);
            __m512 score = round_bf16(_mm512_mul_ps(round_bf16(_mm512_maskz_loadu_ps(m, w + j)), _mm512_set1_ps(scaling)));
            __mmask16 keep = _mm512_mask_cmpneq_epi32_mask(m, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, allowed + j)),
                                                           _mm512_setzero_si512());
            score = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keep, score);
            _mm512_mask_storeu_ps(w + j, m, score);
            top = _mm512_max_ps(top, score);
        }
        __m512 highest = _mm512_set1_ps(_mm512_reduce_max_ps(top)), total = _mm512_setzero_ps();
        for (int j = 0; j < length; j += 16) {
            __mmask16 m = lanes(length - j);
            __m512 e = _mm512_maskz_mov_ps(m, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, w + j), highest)));
            _mm512_mask_storeu_ps(w + j, m, e);
            total = _mm512_add_ps(total, e);
        }
        __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(total));
        for (int j = 0; j < length; j += 16) {
            __mmask16 m = lanes(length - j);
            _mm512_mask_storeu_ps(w + j, m, round_bf16(_mm512_div_ps(_mm512_maskz_loadu_ps(m, w + j), sum)));
        }
    }
    __m512 acc[8][8];
    for (int g = 0; g < groups; g++)
        for (int c = 0; c < chunks; c++) acc[g][c] = _mm512_setzero_ps();
    for (int j = 0; j < length; j++) {
        __m512 v[8];
        for (int c = 0; c < chunks; c++) v[c] = load(values + (long)j * chunks * 16 + c * 16, 0xffff);
        for (int g = 0; g < groups; g++) {
            __m512 p = _mm512_set1_ps(weights[g * length + j]);
            for (int c = 0; c < chunks; c++) acc[g][c] = _mm512_fmadd_ps(p, v[c], acc[g][c]);
        }
    }
    for (int g = 0; g < groups; g++)
        for (int c = 0; c < chunks; c++) store(out + g * chunks * 16 + c * 16, acc[g][c], 0xffff);
}

/* Attention of one token per row over the first `length` positions of the buffers [rows, kv_heads, capacity, dim],
 * rounded as eager's: scores bf16(q.k), then bf16(score * scaling), masked where mask [rows, mask_row] is 0, softmax
 * in fp32 rounded to bf16, out = bf16(sum of weights x values). Query head h reads key-value head h / (heads /
 * kv_heads); the queries are qkv's first heads [rows, heads + 2 kv_heads, dim]; out [rows, heads * dim].
 * Only for heads of 64 or 128 dims, up to 8 query heads per key-value head (`attention_fits`). */
int attention_fits(int heads, int kv_heads, int dim) {
    return (dim == 64 || dim == 128) && kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= 8;
}

#define ATTEND_GROUPS(chunks)                                                                                  \
    switch (groups) {                                                                                          \
        case 1: attend(1, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 2: attend(2, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 3: attend(3, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 4: attend(4, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 5: attend(5, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 6: attend(6, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        case 7: attend(7, chunks, length, query, keys, values, allowed, scaling, weights, o); break;           \
        default: attend(8, chunks, length, query, keys, values, allowed, scaling, weights, o); break;          \
    }

void decode_attention(int rows, int heads, int kv_heads, int dim, int length, const bf16 *qkv, const bf16 *key_buffer,
                      const bf16 *value_buffer, long buffer_row, int capacity, const uint8_t *mask, long mask_row,
                      float scaling, bf16 *out) {
    int groups = heads / kv_heads, all = heads + 2 * kv_heads, chunks = dim / 16;
#pragma omp parallel if (rows * kv_heads >= 8)
    {
        float *weights = malloc(sizeof(float) * groups * length);
        __m512 query[8 * 8];
#pragma omp for schedule(static)
        for (int pair = 0; pair < rows * kv_heads; pair++) {
            int r = pair / kv_heads, kv = pair % kv_heads;
            const bf16 *keys = key_buffer + r * buffer_row + (long)kv * capacity * dim;
            const bf16 *values = value_buffer + r * buffer_row + (long)kv * capacity * dim;
            for (int g = 0; g < groups; g++)
                for (int c = 0; c < chunks; c++) query[g * chunks + c] = load(qkv + ((long)r * all + kv * groups + g) * dim + c * 16, 0xffff);
            const uint8_t *allowed = mask + r * mask_row;
            bf16 *o = out + ((long)r * heads + kv * groups) * dim;
            if (chunks == 4) {
                ATTEND_GROUPS(4)
            } else {
                ATTEND_GROUPS(8)
            }
        }
        free(weights);
    }
}

/* out = bf16(bf16(silu(gate)) * up), each [n]: the MLP's activation as eager rounds it. */
void silu_mul(long n, const bf16 *gate, const bf16 *up, bf16 *out) {
#pragma omp parallel for if (n >= 16384) schedule(static)
    for (long i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        __m512 g = load(gate + i, m);
        __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        store(out + i, _mm512_mul_ps(round_bf16(silu), load(up + i, m)), m);
    }
}

/* out = weight * bf16(x * r), r = rsqrt(mean(x^2) + eps) of each row of x [rows, hidden], kept in inv_rms [rows]:
 * transformers' Llama RMSNorm, for the update (`rms_norm_backward` takes r). */
void rms_norm_forward(long rows, int hidden, const bf16 *x, const bf16 *weight, float eps, bf16 *out, float *inv_rms) {
#pragma omp parallel for if (rows >= 8) schedule(static)
    for (long r = 0; r < rows; r++) {
        const bf16 *xr = x + r * hidden;
        bf16 *y = out + r * hidden;
        __m512 squares = _mm512_setzero_ps();
        for (int i = 0; i < hidden; i += 16) {
            __m512 v = load(xr + i, lanes(hidden - i));
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        float scale = 1.0f / sqrtf(_mm512_reduce_add_ps(squares) / hidden + eps);
        inv_rms[r] = scale;
        for (int i = 0; i < hidden; i += 16) {
            __mmask16 m = lanes(hidden - i);
            store(y + i, _mm512_mul_ps(load(weight + i, m), round_bf16(_mm512_mul_ps(load(xr + i, m), _mm512_set1_ps(scale)))), m);
        }
    }
}

/* rms_norm_forward's gradients as eager's autograd rounds them, grad [rows, hidden] the output's: dy = bf16(grad
 * weight); grad_x = bf16(dy r - x r^3 sum(dy x) / hidden); the weight's, each thread's share of the sum over rows of
 * bf16(grad bf16(x r)), into weight_sums [slots, hidden] (fp32; slots >= threads; the caller adds them up). */
void rms_norm_backward(long rows, int hidden, const bf16 *grad, const bf16 *x, const bf16 *weight, const float *inv_rms,
                       bf16 *grad_x, float *weight_sums, int slots) {
    memset(weight_sums, 0, sizeof(float) * hidden * slots);
#pragma omp parallel num_threads(slots) if (rows >= 8)
    {
        float *dw = weight_sums + (long)omp_get_thread_num() * hidden;
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            const bf16 *g = grad + r * hidden, *xr = x + r * hidden;
            __m512 scale = _mm512_set1_ps(inv_rms[r]), dot = _mm512_setzero_ps();
            for (int i = 0; i < hidden; i += 16) {
                __mmask16 m = lanes(hidden - i);
                __m512 gv = load(g + i, m), xv = load(xr + i, m);
                dot = _mm512_fmadd_ps(round_bf16(_mm512_mul_ps(gv, load(weight + i, m))), xv, dot);
                __m512 y = round_bf16(_mm512_mul_ps(xv, scale));
                _mm512_mask_storeu_ps(dw + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dw + i), round_bf16(_mm512_mul_ps(gv, y))));
            }
            float r1 = inv_rms[r];
            __m512 c = _mm512_set1_ps(-r1 * r1 * r1 * _mm512_reduce_add_ps(dot) / hidden);
            for (int i = 0; i < hidden; i += 16) {
                __mmask16 m = lanes(hidden - i);
                __m512 dy = round_bf16(_mm512_mul_ps(load(g + i, m), load(weight + i, m)));
                store(grad_x + r * hidden + i, _mm512_fmadd_ps(dy, scale, _mm512_mul_ps(c, load(xr + i, m))), m);
            }
        }
    }
}
