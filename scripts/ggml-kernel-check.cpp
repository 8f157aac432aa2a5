// Checks ggml's CPU matrix product of quantized weights (Q4_K, Q6_K: a Q4_K_M file's; Q8_0,
// Q4_0, Q5_0) and 1-16 rows of activations, the path a decode step and the drafts it verifies
// take, against an exact reference (scripts/ggml-kernel-check.sh builds and runs it; issue 57).
//
// The weights are random blocks of the format (every bit pattern of quants and scales), in
// the buffer llama.cpp loads them into (the CPU "repack" buffer where it takes the tensor:
// Q4_K and Q4_0 with 8 | N on x86), times rows of random activations (one outlier in some).
// Shapes: K of 1, 3 and 11 blocks (and 49 for the 32-element formats: more than one
// thread's or tile's worth); N of one 8-column group, 17 and 65 groups (an odd tail for a
// thread's chunk), 12 (not repacked) and, for the 32-element formats, 13 (an odd row left
// over by the pairs of rows sgemm's small-batch path runs); one and two threads. The
// reference quantizes the activations as ggml does (q8_K or q8_0: a = d_a*qa), then sums
// the exact products in double, so what is left is the float rounding of ggml's kernels.
//
// Bound, u = 2^-24 (Higham, 3.1: a sum whose every term passed through at most k roundings
// in a row is off by at most gamma_k = k*u/(1 - k*u) times the sum of the terms' absolute
// values; here k*u << 1, so k*u*(1.01) is within it).
// Q4_K: w = d*sc*q - dmin*m (q 4 bits, sc and m 6 bits); Q6_K: w = d*sc*(q-32) (q 6 bits,
// sc 8 bits). Every kernel sums a block's integer products exactly; the block then adds one
// or two float terms (d*d_a*I, dmin*d_a*M), each after at most three roundings (the product
// of the scales, the conversion of I to float where |I| >= 2^24, the accumulation), and the
// lanes of the accumulator are summed at the end (at most 4 more). With A = the sum over
// elements of |w*a| split into those terms (it bounds every partial sum), the error is at
// most gamma_k*A with k = 3*nb + 4: the tolerance is (3*nb + 4)*u*A.
// Q8_0, Q4_0, Q5_0 (32 elements a block, one fp16 scale d; w = d*q, q 8 bits signed, or
// 4 or 5 bits less 8 or 16) times q8_0 rows: each kernel sums a block's (or a lane's part of
// it) integer products exactly (|I| <= 32*128*127 < 2^24: its conversion to float is exact),
// then adds d*d_a*I to a float accumulator with one fused madd: a term is rounded once in
// the product of the scales, once in its own madd and once in each of the (at most nb - 1)
// madds after it, then in the sum of the 8 lanes (3, a tree; none where the lanes are 8
// columns, as in the repacked Q4_0): k = nb + 4, and the tolerance is (nb + 5)*u*A (one
// spare for gamma's denominator), A as above. A dropped block or another row's activations
// miss by a sizable fraction of A (about A/sqrt(K) for random data): many times the bound.
//
// Bit for bit: each row of a product of 2 or more rows must equal that row's product alone
// (the one-token step), where the kernels promise it (identical_rows below).
//
//   usage: ggml-kernel-check [threads]        0 when every case is within its bound
//          ggml-kernel-check --time ROWS REPS  one product's time, one thread
//          (CHECK_N: columns, default 512, an L2-resident matrix; CHECK_TYPE: q4_K
//          (default), q6_K, q8_0, q4_0, q5_0; CHECK_Q6_K=1: q6_K)
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <ctime>
#include <random>
#include <string>
#include <vector>

// block layouts as in ggml-common.h (fixed by the GGUF format)
struct q4_K_block { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct q6_K_block { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct q8_K_block { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(q6_K_block) == 210, "q6_K");
static_assert(sizeof(q4_K_block) == 144, "q4_K");
static_assert(sizeof(q8_K_block) == 292, "q8_K");
struct q8_0_block { uint16_t d; int8_t qs[32]; };
struct q4_0_block { uint16_t d; uint8_t qs[16]; };
struct q5_0_block { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
static_assert(sizeof(q8_0_block) == 34 && sizeof(q4_0_block) == 18 && sizeof(q5_0_block) == 22, "q8_0, q4_0, q5_0");

static void q4_K_scale_min(int j, const uint8_t * q, int & sc, int & m) {
    if (j < 4) { sc = q[j] & 63; m = q[j + 4] & 63; }
    else { sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}

struct result { double value, abs; };

// exact product of one Q4_K row and one q8_K row (in double: every term is exact there)
static result ref_q4_K(const q4_K_block * w, const q8_K_block * a, int nb) {
    double v = 0, s = 0;
    for (int b = 0; b < nb; b++) {
        const double d = ggml_fp16_to_fp32(w[b].d), dmin = ggml_fp16_to_fp32(w[b].dmin), da = a[b].d;
        for (int j = 0; j < 8; j++) {
            int sc, m; q4_K_scale_min(j, w[b].scales, sc, m);
            long dot = 0, sum = 0, adot = 0, asum = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * j + l;  // element e: byte 32*(e/64) + e%32, low nibble for (e/32) even
                const int q = (w[b].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
                const int qa = a[b].qs[e];
                dot += q * qa; sum += qa; adot += std::abs(q * qa); asum += std::abs(qa);
            }
            v += da * (d * sc * dot - dmin * m * sum);
            s += std::fabs(da) * (std::fabs(d) * sc * adot + std::fabs(dmin) * m * asum);
        }
    }
    return { v, s };
}

// Q6_K: value = d*sc[e/16]*(q-32), q of element e = 128h + 32k + l (h, k < 4, l < 32):
// low 4 bits from ql[64h + l + 32*(k%2)] (the high nibble for k >= 2), top 2 from qh[32h + l] >> 2k
static result ref_q6_K(const q6_K_block * w, const q8_K_block * a, int nb) {
    double v = 0, s = 0;
    for (int b = 0; b < nb; b++) {
        const double d = ggml_fp16_to_fp32(w[b].d), da = a[b].d;
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const int lo = (w[b].ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
            const int hi = (w[b].qh[32 * h + l] >> (2 * k)) & 3;
            const double t = da * d * w[b].scales[e / 16] * ((lo | (hi << 4)) - 32) * a[b].qs[e];
            v += t; s += std::fabs(t);
        }
    }
    return { v, s };
}

// the 32-element formats: q of element e (0-31) as a signed integer, w = d*q
static int q_of(const q8_0_block & b, int e) { return b.qs[e]; }
static int q_of(const q4_0_block & b, int e) { return ((b.qs[e % 16] >> (4 * (e / 16))) & 0xF) - 8; }
static int q_of(const q5_0_block & b, int e) {
    uint32_t qh; memcpy(&qh, b.qh, 4);
    return (((b.qs[e % 16] >> (4 * (e / 16))) & 0xF) | (((qh >> e) & 1) << 4)) - 16;
}

// exact product of one row of a 32-element format and one q8_0 row
template <typename B>
static result ref_q32(const B * w, const q8_0_block * a, int nb) {
    double v = 0, s = 0;
    for (int b = 0; b < nb; b++) {
        long dot = 0, adot = 0;
        for (int e = 0; e < 32; e++) {
            dot += (long) q_of(w[b], e) * a[b].qs[e]; adot += std::labs((long) q_of(w[b], e) * a[b].qs[e]);
        }
        const double d = (double) ggml_fp16_to_fp32(w[b].d) * ggml_fp16_to_fp32(a[b].d);
        v += d * dot; s += std::fabs(d) * adot;
    }
    return { v, s };
}

static ggml_backend_buffer_type_t repack_buft(ggml_backend_t cpu) {
    ggml_backend_dev_t dev = ggml_backend_get_device(cpu);
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * p = get ? get(dev) : nullptr; p && *p; p++) {
        if (strcmp(ggml_backend_buft_name(*p), "CPU_REPACK") == 0) return *p;
    }
    return nullptr;
}

struct product {
    ggml_context * ctx_w, * ctx;
    ggml_backend_buffer_t buf_w, buf;
    ggml_tensor * w, * x, * y;
    ggml_cgraph * gf;
    product(ggml_backend_t cpu, ggml_type type, int K, int N, int R, const void * wdata) {
        ggml_init_params p = { 4 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
        ctx_w = ggml_init(p); ctx = ggml_init(p);
        w = ggml_new_tensor_2d(ctx_w, type, K, N);
        x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, R);
        y = ggml_mul_mat(ctx, w, x);
        gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        // llama.cpp puts a weight there only where the repack takes it: Q4_K and Q4_0 with
        // 8 | N (on x86; Q6_K, Q8_0 and Q5_0 are not repacked there)
        ggml_backend_buffer_type_t rb = (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q4_0) && N % 8 == 0 ? repack_buft(cpu) : nullptr;
        buf_w = rb ? ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, rb) : nullptr;
        if (!buf_w) buf_w = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, ggml_backend_cpu_buffer_type());
        buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        ggml_backend_tensor_set(w, wdata, 0, ggml_nbytes(w));
    }
    bool repacked() const { return w->extra != nullptr; }
    ~product() { ggml_backend_buffer_free(buf_w); ggml_backend_buffer_free(buf); ggml_free(ctx_w); ggml_free(ctx); }
};

static std::vector<q6_K_block> random_q6_K(std::mt19937 & rng, int K, int N) {
    std::vector<q6_K_block> w((size_t) N * K / 256);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(1e-5f, 1e-3f);
    for (auto & b : w) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        for (auto & q : b.ql) q = (uint8_t) byte(rng);
        for (auto & q : b.qh) q = (uint8_t) byte(rng);
        for (auto & q : b.scales) q = (int8_t) byte(rng);
    }
    return w;
}

static std::vector<q4_K_block> random_q4_K(std::mt19937 & rng, int K, int N) {
    std::vector<q4_K_block> w((size_t) N * K / 256);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
    for (auto & b : w) {
        b.d = ggml_fp32_to_fp16(scale(rng)); b.dmin = ggml_fp32_to_fp16(scale(rng));
        for (auto & s : b.scales) s = (uint8_t) byte(rng);
        for (auto & q : b.qs) q = (uint8_t) byte(rng);
    }
    return w;
}

template <typename B>
static std::vector<B> random_q32(std::mt19937 & rng, int K, int N) {
    std::vector<B> w((size_t) N * K / 32);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
    for (auto & b : w) {
        uint8_t * p = (uint8_t *) &b;
        for (size_t i = 2; i < sizeof(B); i++) p[i] = (uint8_t) byte(rng);
        b.d = ggml_fp32_to_fp16(scale(rng));
    }
    return w;
}

// The rows up to which a product is bit-identical to each row's alone: the kernels of
// patches/llama.cpp/0005 (Q4_K repacked: 15, Q6_K: 12; 0007 gives them prefetching and, where
// AVX-512 is, 512-bit registers and tiles of up to 16 rows: the same sums, the same limits) and, for Q4_K where it is not
// repacked, ggml_vec_dot_q4_K_q8_K run once per row (up to 7: from 8 the tiled path takes
// it, as upstream). Past these, upstream's tiled kernels sum in another order.
// Q8_0, Q5_0 and Q4_0 where it is not repacked take llamafile's sgemm, whose tiles (and
// patches/llama.cpp/0006's small-batch path) all sum in one order; Q4_0 repacked: 0006's
// kernel, 2-16 rows (0009: all of them through its 512-bit tile where AVX-512 VNNI is, else
// 2-3 rows and upstream's 4-row gemm, which sums as the gemv does).
static int identical_rows(ggml_type type, bool repacked) {
    switch (type) {
        case GGML_TYPE_Q6_K: return 12;
        case GGML_TYPE_Q4_K: return repacked ? 15 : 7;
        default: return 16;
    }
}

template <typename B, typename Q>
static int check_type(ggml_backend_t cpu, ggml_type type, const char * name, int threads,
                      std::vector<B> (*random)(std::mt19937 &, int, int), result (*ref)(const B *, const Q *, int)) {
    std::mt19937 rng(57);
    std::normal_distribution<float> normal(0.f, 1.f);
    const int QK = sizeof(Q) == sizeof(q8_K_block) ? 256 : 32;  // elements a block
    const ggml_from_float_t to_q8 = ggml_get_type_traits_cpu(QK == 256 ? GGML_TYPE_Q8_K : GGML_TYPE_Q8_0)->from_float;
    // rounding steps a term goes through (the bound in the header)
    const auto steps = [QK](int nb) { return QK == 256 ? 3.0 * nb + 4 : nb + 5.0; };
    ggml_backend_cpu_set_n_threads(cpu, threads);
    // K: one block, three, eleven (an odd count), and for 32-element blocks 49; N: one group
    // of 8 columns, an odd number of groups (17, 65: a tail for a thread's chunk), 12 (not a
    // multiple of 8: not repacked) and for 32-element blocks 13 (odd: a row without a pair)
    std::vector<int> Ks = { QK, 3 * QK, 11 * QK };
    std::vector<int> Ns = { 8, 136, 520, 12 };
    if (QK == 32) { Ks.push_back(49 * QK); Ns.push_back(13); }
    int failures = 0, cases = 0, repacked = 0;
    double worst = 0;
    for (int K : Ks) for (int N : Ns) {
        const auto wq = random(rng, K, N);
        const int nb = K / QK;
        for (int R = 1; R <= 16; R++) {
            product p(cpu, type, K, N, R, wq.data());
            std::vector<float> x((size_t) K * R);
            for (auto & v : x) v = normal(rng);
            if (R % 3 == 0) x[(size_t) rng() % x.size()] = 40.f;  // an outlier: one block's scale set by it
            ggml_backend_tensor_set(p.x, x.data(), 0, x.size() * sizeof(float));
            if (ggml_backend_graph_compute(cpu, p.gf) != GGML_STATUS_SUCCESS) { printf("compute failed\n"); return 2; }
            std::vector<float> y((size_t) N * R);
            ggml_backend_tensor_get(p.y, y.data(), 0, y.size() * sizeof(float));
            std::vector<Q> a((size_t) nb);
            cases++; repacked += p.repacked();
            int bad = 0;
            for (int r = 0; r < R; r++) {
                to_q8(x.data() + (size_t) r * K, a.data(), K);
                for (int c = 0; c < N; c++) {
                    const result r_ = ref(wq.data() + (size_t) c * nb, a.data(), nb);
                    const result & ref = r_;
                    const double tol = steps(nb) * std::ldexp(1.0, -24) * ref.abs;
                    const double err = std::fabs(y[(size_t) r * N + c] - ref.value);
                    worst = std::max(worst, err / tol);
                    if (!(err <= tol) && bad++ < 3) {
                        printf("FAIL %s K=%d N=%d rows=%d: row %d col %d: %.9g, reference %.9g (|diff| %.3g > bound %.3g)\n",
                               name, K, N, R, r, c, y[(size_t) r * N + c], ref.value, err, tol);
                    }
                }
            }
            // each row as a one-token step computes it (R = 1): a verify row's logits must be
            // bit-identical to the plain step's, or speculation is exact for another model
            // (at T = 0 a near-tie breaks the other way; under top-p a token crosses the cut)
            for (int r = 0; R > 1 && R <= identical_rows(type, p.repacked()) && r < R; r++) {
                product q(cpu, type, K, N, 1, wq.data());
                ggml_backend_tensor_set(q.x, x.data() + (size_t) r * K, 0, (size_t) K * sizeof(float));
                if (ggml_backend_graph_compute(cpu, q.gf) != GGML_STATUS_SUCCESS) { printf("compute failed\n"); return 2; }
                std::vector<float> y1((size_t) N);
                ggml_backend_tensor_get(q.y, y1.data(), 0, y1.size() * sizeof(float));
                for (int c = 0; c < N; c++) {
                    if (memcmp(&y1[c], &y[(size_t) r * N + c], sizeof(float)) != 0 && bad++ < 3) {
                        printf("FAIL %s K=%d N=%d rows=%d: row %d col %d: %.9g, alone %.9g (not bit-identical)\n",
                               name, K, N, R, r, c, y[(size_t) r * N + c], y1[c]);
                    }
                }
            }
            failures += bad > 0;
        }
    }
    printf("%s: %d of %d cases within the bound (%d repacked), threads=%d, worst |diff|/bound %.3f\n",
           name, cases - failures, cases, repacked, threads, worst);
    return failures ? 1 : 0;
}

static int check(ggml_backend_t cpu, int threads) {
    int rc = check_type<q4_K_block, q8_K_block>(cpu, GGML_TYPE_Q4_K, "q4_K", threads, random_q4_K, ref_q4_K);
    rc |= check_type<q6_K_block, q8_K_block>(cpu, GGML_TYPE_Q6_K, "q6_K", threads, random_q6_K, ref_q6_K);
    rc |= check_type<q8_0_block, q8_0_block>(cpu, GGML_TYPE_Q8_0, "q8_0", threads, random_q32<q8_0_block>, ref_q32<q8_0_block>);
    rc |= check_type<q4_0_block, q8_0_block>(cpu, GGML_TYPE_Q4_0, "q4_0", threads, random_q32<q4_0_block>, ref_q32<q4_0_block>);
    return rc | check_type<q5_0_block, q8_0_block>(cpu, GGML_TYPE_Q5_0, "q5_0", threads, random_q32<q5_0_block>, ref_q32<q5_0_block>);
}

static int timing(ggml_backend_t cpu, int R, int reps) {
    std::mt19937 rng(1);
    const int K = 1536, N = getenv("CHECK_N") ? atoi(getenv("CHECK_N")) : 512;  // 512: 432 KiB of Q4_K, stays in L2, so this times compute
    std::string name = getenv("CHECK_TYPE") ? getenv("CHECK_TYPE") : getenv("CHECK_Q6_K") ? "q6_K" : "q4_K";
    ggml_type type; std::vector<uint8_t> w;
    const auto bytes = [&w](const auto & v) { w.assign((const uint8_t *) v.data(), (const uint8_t *) (v.data() + v.size())); };
    if (name == "q6_K") { type = GGML_TYPE_Q6_K; bytes(random_q6_K(rng, K, N)); }
    else if (name == "q8_0") { type = GGML_TYPE_Q8_0; bytes(random_q32<q8_0_block>(rng, K, N)); }
    else if (name == "q4_0") { type = GGML_TYPE_Q4_0; bytes(random_q32<q4_0_block>(rng, K, N)); }
    else if (name == "q5_0") { type = GGML_TYPE_Q5_0; bytes(random_q32<q5_0_block>(rng, K, N)); }
    else { name = "q4_K"; type = GGML_TYPE_Q4_K; bytes(random_q4_K(rng, K, N)); }
    product p(cpu, type, K, N, R, w.data());
    std::vector<float> x((size_t) K * R, 0.5f);
    ggml_backend_tensor_set(p.x, x.data(), 0, x.size() * sizeof(float));
    ggml_backend_cpu_set_n_threads(cpu, 1);
    // wall time, and this thread's CPU time (one thread computes on the caller's): on a
    // shared machine the CPU time leaves out the time the thread waited for a core
    const auto cpu_us = [] { timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3; };
    std::vector<double> t, c;
    for (int i = 0; i < reps; i++) {
        auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_us();
        ggml_backend_graph_compute(cpu, p.gf);
        c.push_back(cpu_us() - c0);
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::sort(c.begin(), c.end());
    printf("%s K=%d N=%d rows=%d: min %.1f us, median %.1f us, CPU min %.1f us, CPU median %.1f us, %.3f ns per weight and row (min)\n",
           name.c_str(), K, N, R, t[0], t[t.size() / 2], c[0], c[c.size() / 2], t[0] * 1e3 / ((double) K * N * R));
    return 0;
}

int main(int argc, char ** argv) {
    ggml_log_set([](ggml_log_level level, const char * text, void *) { if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr); }, nullptr);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    int rc = argc > 3 && strcmp(argv[1], "--time") == 0 ? timing(cpu, atoi(argv[2]), atoi(argv[3]))
                                                          : check(cpu, argc > 1 ? atoi(argv[1]) : 2);
    ggml_backend_free(cpu);
    return rc;
}
