//go:build cuda

package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"gorgonia.org/cu/nvrtc"
)

// The kernels are CUDA C in kernelSource, compiled by NVRTC for the device's architecture the
// first time a process needs them and cached on disk as PTX under
// $XDG_CACHE_HOME/goddp/kernels (default ~/.cache/goddp/kernels), named by the sha256 of the
// source, the options and the architecture. Half values are handled as their 16 bits with PTX cvt
// instructions, so no header is needed. Most kernels take a dtype code per floating tensor
// (0 f32, 1 f16: DType's values) and branch on it; the branch is uniform across a launch.

const kernelSource = `
typedef unsigned short half_t;
typedef unsigned long long u64;
#define INF __int_as_float(0x7f800000)

__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ld(const void* p, int dt, long i) {
	return dt == 0 ? ((const float*)p)[i] : h2f(((const half_t*)p)[i]);
}
__device__ __forceinline__ void st(void* p, int dt, long i, float v) {
	if (dt == 0) ((float*)p)[i] = v; else ((half_t*)p)[i] = f2h(v);
}
__device__ __forceinline__ float warpSum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
	return v;
}
__device__ __forceinline__ double warpSumD(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
	return v;
}
__device__ __forceinline__ float warpMax(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
	return v;
}
// blockSum: sum over the block (blockDim.x a multiple of 32, at most 1024). All threads get it.
__device__ float blockSum(float v) {
	__shared__ float sh[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warpSum(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.f;
	return warpSum(v);
}
__device__ double blockSumD(double v) {
	__shared__ double shd[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warpSumD(v);
	__syncthreads();
	if (lane == 0) shd[w] = v;
	__syncthreads();
	v = lane < nw ? shd[lane] : 0.0;
	return warpSumD(v);
}
// Online softmax statistics: running max m and sum s of exp(x - m).
__device__ __forceinline__ void omerge(float& m, float& s, float m2, float s2) {
	float M = fmaxf(m, m2);
	float a = m == -INF ? 0.f : s * expf(m - M);
	float b = m2 == -INF ? 0.f : s2 * expf(m2 - M);
	m = M; s = a + b;
}
__device__ void blockMaxSum(float& m, float& s) {
	__shared__ float shm[32], shs[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffff, m, o), s2 = __shfl_xor_sync(0xffffffff, s, o);
		omerge(m, s, m2, s2);
	}
	__syncthreads();
	if (lane == 0) { shm[w] = m; shs[w] = s; }
	__syncthreads();
	m = lane < nw ? shm[lane] : -INF;
	s = lane < nw ? shs[lane] : 0.f;
	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffff, m, o), s2 = __shfl_xor_sync(0xffffffff, s, o);
		omerge(m, s, m2, s2);
	}
}


` + vec8Source + `// GELU_TANH_APPROX (GODDP_GELU_TANH_APPROX=1, kernelOptions; measured +0.6% at b16: off): the 8-wide
// GELU kernels' tanh as one tanh.approx.f32 (relative error below 2^-10.9, about an f16 rounding)
// instead of tanhf's ~20 instructions: the GELU passes do ~30 instructions an element for 4–6
// bytes of traffic, so their arithmetic is a large part of their time. Not the bits of tanhf.
// Unset, GELU_TANH is tanhf itself (the preprocessor's text: the kernels the suite ran).
#ifndef GELU_TANH_APPROX
#define GELU_TANH_APPROX 0
#endif
#if GELU_TANH_APPROX
__device__ __forceinline__ float gelu_tanh(float x) {
	float y;
	asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}
#define GELU_TANH gelu_tanh
#else
#define GELU_TANH tanhf
#endif
__device__ __forceinline__ float gelu_f(float v) { return 0.5f * v * (1.f + GELU_TANH(0.7978845608028654f * (v + 0.044715f * v * v * v))); }
__device__ __forceinline__ float gelu_g(float v) {
	float t = GELU_TANH(0.7978845608028654f * (v + 0.044715f * v * v * v));
	return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * v * v);
}
// FOR8: grid-stride over n8 vectors with 32-bit indices; i is the first element of the vector.
#define FOR8(i, n8) for (int _v = blockIdx.x * blockDim.x + threadIdx.x; _v < (n8); _v += gridDim.x * blockDim.x) \
	for (int i = _v * 8, _once = 1; _once; _once = 0)
// LayerNorm backward for C <= 32·K: a warp keeps its row (x̂ and dy) and its dw, db partial sums in
// registers (column lane + 32·k), and adds them to the block's shared sums once at the end.
template <int K>
__device__ __forceinline__ void ln_bwd_regs(void* dxp, int ddx, float* part, const void* dyp, int ddy, const void* x, int dxt,
		const void* w, int dw, const float* mean, const float* rstd, int R, int C) {
	extern __shared__ float sh[];
	for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) sh[j] = 0.f;
	__syncthreads();
	int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
	float aw[K], ab[K], xr[K], gr[K];
	#pragma unroll
	for (int k = 0; k < K; k++) { aw[k] = 0.f; ab[k] = 0.f; }
	for (int row = blockIdx.x * nw + (threadIdx.x >> 5); row < R; row += gridDim.x * nw) {
		long base = (long)row * C;
		float m = mean[row], r = rstd[row];
		float sd = 0.f, sdx = 0.f;
		#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = lane + 32 * k;
			if (j < C) {
				float xh = (ld(x, dxt, base + j) - m) * r;
				float g = ld(dyp, ddy, base + j);
				float dn = g * ld(w, dw, j);
				xr[k] = xh; gr[k] = g;
				sd += dn; sdx += dn * xh;
				aw[k] += g * xh; ab[k] += g;
			}
		}
		float md = warpSum(sd) / C, mdx = warpSum(sdx) / C;
		#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = lane + 32 * k;
			if (j < C) {
				float dn = gr[k] * ld(w, dw, j);
				st(dxp, ddx, base + j, ld(dxp, ddx, base + j) + (dn - md - xr[k] * mdx) * r);
			}
		}
	}
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = lane + 32 * k;
		if (j < C) { atomicAdd(&sh[j], aw[k]); atomicAdd(&sh[C + j], ab[k]); }
	}
	__syncthreads();
	for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) part[(long)blockIdx.x * 2 * C + j] = sh[j];
}

#define LNB_ARGS void* dxp, int ddx, float* part, const void* dyp, int ddy, const void* x, int dxt, \
	const void* w, int dw, const float* mean, const float* rstd, int R, int C
#define LNB_PASS dxp, ddx, part, dyp, ddy, x, dxt, w, dw, mean, rstd, R, C

// rnd8: v as st8 then ld8 would leave it: rounded to the module's half when dt is not f32.
__device__ __forceinline__ void rnd8(int dt, float* v) {
	if (dt != 0) {
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = h2f(f2h(v[k]));
	}
}
// LayerNorm backward, 8-wide, for C = 256·K (16-byte aligned rows): dx by a warp per row holding
// its row in registers; dw and db by a column kernel (k_ln_dwdb8), so no kernel does atomics.
// ln_bwd8_row: ln_bwd_dx8's work on one row (its warp: lane l, the K chunks of 8 at (l + 32k)·8),
// adding into dx; with PARTS, lane l also accumulates k_ln_dwdb8's dw, db partials of its columns
// from the row's raw x and dy (ln_bwd8_fused). One body, so the two kernels share their arithmetic.
// EARLY loads the row of dx it adds into with x and dy, before the sums, so the three loads are in
// flight together instead of the last after the warp's reductions (the default; GODDP_LN_BWD_EARLY=0
// off): the same arithmetic, so the same bits. SUMS (with PARTS) also adds the row of dx as
// stored into the column partials as (k_ln_bwd8fs_K: tensor.LNBackwardColSummer).
template <int K, bool PARTS, bool EARLY = false, bool SUMS = false>
__device__ __forceinline__ void ln_bwd8_row(void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt,
		const void* w, int dw, long row, int lane, float m, float r, int C, float (&aw)[K][8], float (&ab)[K][8],
		float (&as)[K][8]) {
	long base = row * C;
	float xr[K][8], dn[K][8], o[K][8];
	float sd = 0.f, sdx = 0.f;
	if constexpr (EARLY) {
		#pragma unroll
		for (int k = 0; k < K; k++) ld8(dxp, ddx, base + (lane + 32 * k) * 8, o[k]);
	}
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		float wv[8];
		ld8(x, dxt, base + j, xr[k]);
		ld8(dyp, ddy, base + j, dn[k]);
		ld8(w, dw, j, wv);
		if constexpr (PARTS) {
			#pragma unroll
			for (int e = 0; e < 8; e++) { aw[k][e] += dn[k][e] * (xr[k][e] - m) * r; ab[k][e] += dn[k][e]; } // k_ln_dwdb8's
		}
		#pragma unroll
		for (int e = 0; e < 8; e++) {
			xr[k][e] = (xr[k][e] - m) * r;
			dn[k][e] *= wv[e];
			sd += dn[k][e]; sdx += dn[k][e] * xr[k][e];
		}
	}
	float md = warpSum(sd) / C, mdx = warpSum(sdx) / C;
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		if constexpr (!EARLY) ld8(dxp, ddx, base + j, o[k]);
		#pragma unroll
		for (int e = 0; e < 8; e++) o[k][e] += (dn[k][e] - md - xr[k][e] * mdx) * r;
		st8(dxp, ddx, base + j, o[k]);
		if constexpr (SUMS) {
			rnd8(ddx, o[k]); // the value stored
			#pragma unroll
			for (int e = 0; e < 8; e++) as[k][e] += o[k][e];
		}
	}
}
template <int K>
__device__ __forceinline__ void ln_bwd_dx8(void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt,
		const void* w, int dw, const float* mean, const float* rstd, int R, int C) {
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= R) return;
	float aw[K][8], ab[K][8]; // unused (no parts)
	ln_bwd8_row<K, false>(dxp, ddx, dyp, ddy, x, dxt, w, dw, row, lane, mean[row], rstd[row], C, aw, ab, ab);
}
// LayerNorm backward in one pass (the default; GODDP_LN_BWD_FUSED=0 off): k_ln_bwd_dx8_K's dx and k_ln_dwdb8's dw
// and db parts from one read of x and dy. Grid (1, parts), block (32, 8), rowsPer as k_ln_dwdb8
// takes it: warp y takes rows r0+y, r0+y+8, … and for each row does what ln_bwd_dx8's warp does
// (lane l, its K chunks of 8, the same sums), while lane l of warp y accumulates the dw, db
// partials of columns (l + 32k)·8… over those rows — exactly the columns and rows thread (l, y) of
// k_ln_dwdb8's column block k covers, in its order — and the block adds its 8 warps' partials in
// k_ln_dwdb8's order. So the two kernels' bits (dx, and the parts), one read of x and dy fewer.
// SUMS (k_ln_bwd8fs_K) adds a third part, the column sums of dx as stored, after db's: parts of
// 3·C values (k_colsum_finish3), dw's and db's the same bits.
template <int K, bool EARLY = false, bool SUMS = false>
__device__ __forceinline__ void ln_bwd8_fused(void* dxp, int ddx, float* part, const void* dyp, int ddy, const void* x, int dxt,
		const void* w, int dw, const float* mean, const float* rstd, int R, int C, int rowsPer) {
	constexpr int NV = SUMS ? 24 : 16; // values a thread hands on per chunk of 8 columns
	__shared__ float sh[8][32][NV + 1];
	int lane = threadIdx.x, ty = threadIdx.y;
	int r0 = blockIdx.y * rowsPer, r1 = min(R, r0 + rowsPer);
	float aw[K][8], ab[K][8], as[K][8];
	#pragma unroll
	for (int k = 0; k < K; k++)
		#pragma unroll
		for (int e = 0; e < 8; e++) { aw[k][e] = 0.f; ab[k][e] = 0.f; if constexpr (SUMS) as[k][e] = 0.f; }
	for (int row = r0 + ty; row < r1; row += 8)
		ln_bwd8_row<K, true, EARLY, SUMS>(dxp, ddx, dyp, ddy, x, dxt, w, dw, row, lane, mean[row], rstd[row], C, aw, ab, as);
	#pragma unroll
	for (int k = 0; k < K; k++) {
		#pragma unroll
		for (int e = 0; e < 8; e++) {
			sh[ty][lane][e] = aw[k][e]; sh[ty][lane][8 + e] = ab[k][e];
			if constexpr (SUMS) sh[ty][lane][16 + e] = as[k][e];
		}
		__syncthreads();
		if (ty == 0) {
			int col = (lane + 32 * k) * 8;
			#pragma unroll
			for (int e = 0; e < NV; e++) {
				float t = 0.f;
				for (int q = 0; q < 8; q++) t += sh[q][lane][e];
				part[(long)blockIdx.y * (NV / 8) * C + (e < 8 ? 0 : (e < 16 ? C : 2 * C)) + col + (e & 7)] = t;
			}
		}
		__syncthreads();
	}
}
// ln_norm8: ln_fwd8's statistics and output from the row in registers.
template <int K>
__device__ __forceinline__ void ln_norm8(float (&xr)[K][8], void* y, int dy, float* mean, float* rstd,
		const void* w, int dw, const void* b, int db, long row, int lane, int C, float eps) {
	long base = row * C;
	float s = 0.f;
	#pragma unroll
	for (int k = 0; k < K; k++)
		#pragma unroll
		for (int e = 0; e < 8; e++) s += xr[k][e];
	float m = warpSum(s) / C;
	float q = 0.f;
	#pragma unroll
	for (int k = 0; k < K; k++)
		#pragma unroll
		for (int e = 0; e < 8; e++) { float d = xr[k][e] - m; q += d * d; }
	float r = 1.f / sqrtf(warpSum(q) / C + eps);
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		float wv[8], bv[8];
		ld8(w, dw, j, wv);
		ld8(b, db, j, bv);
		#pragma unroll
		for (int e = 0; e < 8; e++) xr[k][e] = (xr[k][e] - m) * r * wv[e] + bv[e];
		st8(y, dy, base + j, xr[k]);
	}
	if (lane == 0) { mean[row] = m; rstd[row] = r; }
}
// LayerNorm forward, 8-wide, for C = 256·K (16-byte aligned rows): a warp per row holding its
// row in registers, read once and written once (k_layernorm reads it three times, 2 bytes a lane
// at a time). Each lane sums 8 neighbours, not every 32nd element, so the mean and variance are
// grouped otherwise than k_layernorm's: the same within rounding, not the same bits
// (the default; GODDP_LN_VEC=0 turns it off; TestCUDA_layerNorm8MatchesScalar).
template <int K>
__device__ __forceinline__ void ln_fwd8(void* y, int dy, float* mean, float* rstd, const void* x, int dx,
		const void* w, int dw, const void* b, int db, int R, int C, float eps) {
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = (long)row * C;
	float xr[K][8];
	#pragma unroll
	for (int k = 0; k < K; k++) ld8(x, dx, base + (lane + 32 * k) * 8, xr[k]);
	ln_norm8<K>(xr, y, dy, mean, rstd, w, dw, b, db, row, lane, C, eps);
}
// k_addbias_add_ln8_K's row: out = x + (y + bias) as k_addbias_add8 stores it, then ln_fwd8's
// norm of the stored values, from the registers (the default; GODDP_RESNORM_FOLD=0 off): the two kernels' bits.
template <int K>
__device__ __forceinline__ void addbias_add_ln8(void* o, int dout, void* y2, int dy2, float* mean, float* rstd,
		const void* x, int dx, const void* y, int dy, const void* bias, int dbias,
		const void* w, int dw, const void* b, int db, int R, int C, float eps) {
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = (long)row * C;
	float xr[K][8];
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		float v[8], u[8];
		ld8(y, dy, base + j, v);
		ld8(bias, dbias, j, u);
		ld8(x, dx, base + j, xr[k]);
		#pragma unroll
		for (int e = 0; e < 8; e++) v[e] += u[e];
		rnd8(dy, v); // k_addbias_add8's rounding to y's dtype
		#pragma unroll
		for (int e = 0; e < 8; e++) xr[k][e] += v[e];
		st8(o, dout, base + j, xr[k]);
		rnd8(dout, xr[k]); // what the LayerNorm would read back
	}
	ln_norm8<K>(xr, y2, dy2, mean, rstd, w, dw, b, db, row, lane, C, eps);
}
#define LNF_ARGS void* y, int dy, float* mean, float* rstd, const void* x, int dx, \
	const void* w, int dw, const void* b, int db, int R, int C, float eps
#define LNF_PASS y, dy, mean, rstd, x, dx, w, dw, b, db, R, C, eps
#define LNDX_ARGS void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt, \
	const void* w, int dw, const float* mean, const float* rstd, int R, int C
#define LNDX_PASS dxp, ddx, dyp, ddy, x, dxt, w, dw, mean, rstd, R, C

// Softmax over rows of C = 256·K, 8-wide, a warp per row holding the row in registers (read once,
// written once; causal rows skip loading the masked tail).
template <int K>
__device__ __forceinline__ void softmax8(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) {
	long row = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = row * C;
	int n = causal ? (int)(row % C) + 1 : C;
	float v[K][8];
	float m = -INF;
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		if (j < n) ld8(x, dx, base + j, v[k]);
		#pragma unroll
		for (int e = 0; e < 8; e++) {
			float t = j + e < n ? v[k][e] * scale : -INF;
			v[k][e] = t;
			m = fmaxf(m, t);
		}
	}
	m = warpMax(m);
	float s = 0.f;
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		#pragma unroll
		for (int e = 0; e < 8; e++) {
			float ex = j + e < n ? expf(v[k][e] - m) : 0.f;
			v[k][e] = ex;
			s += ex;
		}
	}
	float inv = 1.f / warpSum(s);
	#pragma unroll
	for (int k = 0; k < K; k++) {
		#pragma unroll
		for (int e = 0; e < 8; e++) v[k][e] *= inv;
		st8(y, dy, base + (lane + 32 * k) * 8, v[k]);
	}
}
template <int K>
__device__ __forceinline__ void softmax_bwd8(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) {
	long row = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = row * C;
	float yv[K][8], g[K][8];
	float dot = 0.f;
	#pragma unroll
	for (int k = 0; k < K; k++) {
		int j = (lane + 32 * k) * 8;
		ld8(y, dyt, base + j, yv[k]);
		ld8(dyp, ddy, base + j, g[k]);
		#pragma unroll
		for (int e = 0; e < 8; e++) dot += yv[k][e] * g[k][e];
	}
	dot = warpSum(dot);
	#pragma unroll
	for (int k = 0; k < K; k++) {
		#pragma unroll
		for (int e = 0; e < 8; e++) g[k][e] = scale * yv[k][e] * (g[k][e] - dot);
		st8(dxp, ddx, base + (lane + 32 * k) * 8, g[k]);
	}
}

#define FOR(i, n) for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

// Counter-based RNG, bit for bit model/tensor/rng.go's.
__device__ __forceinline__ u64 mix64(u64 x) {
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform01(u64 seed, u64 i) {
	u64 r = mix64(seed ^ mix64(i));
	return __fmul_rn(__fadd_rn((float)(r >> 40), 0.5f), 1.0f / 16777216.0f);
}

extern "C" {

__global__ void k_fill(void* p, int dt, long n, float v) {
	FOR(i, n) { if (dt == 2) ((int*)p)[i] = (int)v; else st(p, dt, i, v); }
}
__global__ void k_cast(void* y, int dy, const void* x, int dx, long n) {
	FOR(i, n) st(y, dy, i, ld(x, dx, i));
}
__global__ void k_randnormal(void* y, int dy, long n, float std, u64 seed) {
	FOR(i, n) {
		double u1 = (double)uniform01(seed, 2 * (u64)i);
		double u2 = (double)uniform01(seed, 2 * (u64)i + 1);
		double a = sqrt(-2.0 * log(u1));
		double b = cos(6.283185307179586 * u2);
		float z = (float)(a * b);
		st(y, dy, i, __fmul_rn(std, z));
	}
}
__global__ void k_scale(void* x, int dx, long n, float s) {
	FOR(i, n) st(x, dx, i, ld(x, dx, i) * s);
}
__global__ void k_axpy(void* y, int dy, const void* x, int dx, long n, float a) {
	FOR(i, n) st(y, dy, i, ld(y, dy, i) + a * ld(x, dx, i));
}
__global__ void k_add(void* o, int dout, const void* a, int da, const void* b, int db, long n) {
	FOR(i, n) st(o, dout, i, ld(a, da, i) + ld(b, db, i));
}
__global__ void k_addbias(void* y, int dy, const void* b, int db, long n, int C) {
	FOR(i, n) st(y, dy, i, ld(y, dy, i) + ld(b, db, i % C));
}
// Column sums of x (R,C): block (32,8) sums 32 columns over its slice of rows into part[blockIdx.y][C].
__device__ __forceinline__ void colsum_part(float* part, const void* x, int dx, int R, int C, int rowsPer) {
	__shared__ float sh[8][33];
	int col = blockIdx.x * 32 + threadIdx.x;
	int r0 = blockIdx.y * rowsPer, r1 = min(R, r0 + rowsPer);
	float s = 0.f;
	if (col < C) for (int r = r0 + threadIdx.y; r < r1; r += 8) s += ld(x, dx, (long)r * C + col);
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && col < C) {
		float t = 0.f;
		for (int k = 0; k < 8; k++) t += sh[k][threadIdx.x];
		part[(long)blockIdx.y * C + col] = t;
	}
}
__global__ void k_colsum_part(float* part, const void* x, int dx, int R, int C, int rowsPer) {
	colsum_part(part, x, dx, R, C, rowsPer);
}
// k_colsum_partfin: k_colsum_part, then the last block of each column block to finish (cnt,
// one counter per blockIdx.x, which that block sets back to 0) adds the parts as k_colsum_finish
// does — over p in order, then out[c] += s — so the bits of the two kernels without the second
// launch (the default; GODDP_COLSUM_FUSED=0 off). The parts are read past L1 (__ldcg): other blocks wrote them.
__global__ void k_colsum_partfin(float* part, const void* x, int dx, int R, int C, int rowsPer, void* out, int dout, unsigned* cnt) {
	__shared__ int last;
	int col = blockIdx.x * 32 + threadIdx.x;
	colsum_part(part, x, dx, R, C, rowsPer);
	__threadfence(); // this block's part is visible to the whole device before its count
	__syncthreads();
	if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(&cnt[blockIdx.x], 1u) == gridDim.y - 1;
	__syncthreads();
	if (!last) return;
	__threadfence();
	if (threadIdx.y == 0 && col < C) {
		float t = 0.f;
		for (int p = 0; p < (int)gridDim.y; p++) t += __ldcg(part + (long)p * C + col);
		st(out, dout, col, ld(out, dout, col) + t);
	}
	if (threadIdx.x == 0 && threadIdx.y == 0) cnt[blockIdx.x] = 0;
}
// k_colsum_finish2: k_colsum_finish for two outputs whose parts sit side by side (a LayerNorm's
// dw and db: part[p·2C + c], c < C for dw, C ≤ c < 2C for db), in one launch: each column's sum
// in k_colsum_finish's order, so its bits (the default; GODDP_COLSUM_FUSED=0 off).
__global__ void k_colsum_finish2(void* dw, int ddw, void* db, int ddb, const float* part, int nparts, int C) {
	FOR(c, 2 * C) {
		float s = 0.f;
		for (int p = 0; p < nparts; p++) s += part[(long)p * 2 * C + c];
		if (c < C) st(dw, ddw, c, ld(dw, ddw, c) + s);
		else st(db, ddb, c - C, ld(db, ddb, c - C) + s);
	}
}
// k_colsum_finish3: k_colsum_finish2 with a third output s whose parts follow db's (the column
// sums of a LayerNorm backward's dx: part[p·3C + c], 2C ≤ c < 3C; k_ln_bwd8fs_K), each column's
// sum in k_colsum_finish's order: dw's and db's the bits k_colsum_finish2 gives.
__global__ void k_colsum_finish3(void* dw, int ddw, void* db, int ddb, void* s, int ds, const float* part, int nparts, int C) {
	FOR(c, 3 * C) {
		float t = 0.f;
		for (int p = 0; p < nparts; p++) t += part[(long)p * 3 * C + c];
		if (c < C) st(dw, ddw, c, ld(dw, ddw, c) + t);
		else if (c < 2 * C) st(db, ddb, c - C, ld(db, ddb, c - C) + t);
		else st(s, ds, c - 2 * C, ld(s, ds, c - 2 * C) + t);
	}
}
// out[c] += sum over p of part[p*stride + c], for c < C.
__global__ void k_colsum_finish(void* out, int dout, const float* part, int nparts, int C, long stride) {
	FOR(c, C) {
		float s = 0.f;
		for (int p = 0; p < nparts; p++) s += part[p * stride + c];
		st(out, dout, c, ld(out, dout, c) + s);
	}
}

__global__ void k_relu(void* y, int dy, const void* x, int dx, long n) {
	FOR(i, n) st(y, dy, i, fmaxf(ld(x, dx, i), 0.f));
}
__global__ void k_relu_bwd(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long n) {
	FOR(i, n) st(dxp, ddx, i, ld(y, dyt, i) > 0.f ? ld(dyp, ddy, i) : 0.f);
}
#define GELU_K 0.7978845608028654f
__global__ void k_gelu(void* y, int dy, const void* x, int dx, long n) {
	FOR(i, n) {
		float v = ld(x, dx, i);
		st(y, dy, i, 0.5f * v * (1.f + tanhf(GELU_K * (v + 0.044715f * v * v * v))));
	}
}
__global__ void k_gelu_bwd(void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt, long n) {
	FOR(i, n) {
		float v = ld(x, dxt, i);
		float t = tanhf(GELU_K * (v + 0.044715f * v * v * v));
		float g = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * GELU_K * (1.f + 3.f * 0.044715f * v * v);
		st(dxp, ddx, i, g * ld(dyp, ddy, i));
	}
}
__global__ void k_dropout(void* y, int dy, const void* x, int dx, long n, float p, u64 seed) {
	float s = 1.f / (1.f - p);
	FOR(i, n) st(y, dy, i, uniform01(seed, (u64)i) >= p ? ld(x, dx, i) * s : 0.f);
}

// LayerNorm: one warp per row.
__global__ void k_layernorm(void* y, int dy, float* mean, float* rstd, const void* x, int dx,
		const void* w, int dw, const void* b, int db, int R, int C, float eps) {
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = (long)row * C;
	float s = 0.f;
	for (int j = lane; j < C; j += 32) s += ld(x, dx, base + j);
	float m = warpSum(s) / C;
	float q = 0.f;
	for (int j = lane; j < C; j += 32) { float d = ld(x, dx, base + j) - m; q += d * d; }
	float r = 1.f / sqrtf(warpSum(q) / C + eps);
	for (int j = lane; j < C; j += 32)
		st(y, dy, base + j, (ld(x, dx, base + j) - m) * r * ld(w, dw, j) + ld(b, db, j));
	if (lane == 0) { mean[row] = m; rstd[row] = r; }
}
// LayerNorm backward: one warp per row, rows strided over the grid; dw, db partial sums per block
// in shared memory (2C floats), written to part[blockIdx.x][2C] for k_colsum_finish.
__global__ void k_layernorm_bwd(void* dxp, int ddx, float* part, const void* dyp, int ddy, const void* x, int dxt,
		const void* w, int dw, const float* mean, const float* rstd, int R, int C) {
	extern __shared__ float sh[];
	for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) sh[j] = 0.f;
	__syncthreads();
	int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
	for (int row = blockIdx.x * nw + (threadIdx.x >> 5); row < R; row += gridDim.x * nw) {
		long base = (long)row * C;
		float m = mean[row], r = rstd[row];
		float sd = 0.f, sdx = 0.f;
		for (int j = lane; j < C; j += 32) {
			float xh = (ld(x, dxt, base + j) - m) * r;
			float g = ld(dyp, ddy, base + j);
			float dn = g * ld(w, dw, j);
			sd += dn; sdx += dn * xh;
			atomicAdd(&sh[j], g * xh);
			atomicAdd(&sh[C + j], g);
		}
		float md = warpSum(sd) / C, mdx = warpSum(sdx) / C;
		for (int j = lane; j < C; j += 32) {
			float xh = (ld(x, dxt, base + j) - m) * r;
			float dn = ld(dyp, ddy, base + j) * ld(w, dw, j);
			st(dxp, ddx, base + j, ld(dxp, ddx, base + j) + (dn - md - xh * mdx) * r);
		}
	}
	__syncthreads();
	for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) part[(long)blockIdx.x * 2 * C + j] = sh[j];
}

__global__ void k_embedding(void* out, int dout, const int* ids, const void* wte, int dwte, const void* wpe, int dwpe,
		long n, int T, int C, int V) {
	FOR(i, n) {
		long r = i / C; int j = i % C;
		int id = ids[r];
		float v;
		if (id < 0 || id >= V) v = __int_as_float(0x7fc00000);
		else v = ld(wte, dwte, (long)id * C + j);
		if (wpe) v += ld(wpe, dwpe, (long)(r % T) * C + j);
		st(out, dout, i, v);
	}
}
__device__ void atomicAddF16(half_t* addr, float v) {
	unsigned int* base = (unsigned int*)((size_t)addr & ~(size_t)3);
	unsigned int shift = ((size_t)addr & 2) ? 16 : 0;
	unsigned int old = *base, assumed;
	do {
		assumed = old;
		half_t h = (half_t)((assumed >> shift) & 0xffff);
		unsigned int nw = (assumed & ~(0xffffu << shift)) | ((unsigned int)f2h(h2f(h) + v) << shift);
		old = atomicCAS(base, assumed, nw);
	} while (assumed != old);
}
__global__ void k_embedding_bwd_wte(void* dwte, int ddw, const void* dout, int ddo, const int* ids, long n, int C) {
	FOR(i, n) {
		long r = i / C; int j = i % C;
		long k = (long)ids[r] * C + j;
		float g = ld(dout, ddo, i);
		if (ddw == 0) atomicAdd(&((float*)dwte)[k], g); else atomicAddF16(&((half_t*)dwte)[k], g);
	}
}
// The deterministic embedding backward (GODDP_EMB_SORTED=1): k_emb_sort orders the positions by
// token, stably (a counting sort in one block of 1024 threads, the V counts in shared memory; out:
// perm, the positions in order, tokSorted, their tokens, and ends, where each token's run ends), and
// k_emb_bwd_sorted adds each token's rows into its dwte row in position order — the CPU device's
// order, so its bits, and the same bits run after run, where k_embedding_bwd_wte's atomic adds
// land in whatever order the hardware takes them.
__global__ void __launch_bounds__(1024) k_emb_sort(int* perm, int* tokSorted, int* ends, const int* ids, int N, int V) {
	extern __shared__ int cnt[];
	__shared__ int wsum[32];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	for (int v = tid; v < V; v += blockDim.x) cnt[v] = 0;
	__syncthreads();
	for (int p = tid; p < N; p += blockDim.x) atomicAdd(&cnt[ids[p]], 1);
	__syncthreads();
	// exclusive scan of cnt: thread tid owns [lo, hi)
	int per = (V + blockDim.x - 1) / blockDim.x, lo = min(V, tid * per), hi = min(V, lo + per);
	int sum = 0;
	for (int v = lo; v < hi; v++) sum += cnt[v];
	int inc = sum;
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffff, inc, o);
		if (lane >= o) inc += u;
	}
	if (lane == 31) wsum[warp] = inc;
	__syncthreads();
	if (warp == 0) {
		int w = lane < (int)(blockDim.x >> 5) ? wsum[lane] : 0, wi = w;
		for (int o = 1; o < 32; o <<= 1) {
			int u = __shfl_up_sync(0xffffffff, wi, o);
			if (lane >= o) wi += u;
		}
		wsum[lane] = wi - w; // the warps before this one
	}
	__syncthreads();
	int run = wsum[warp] + inc - sum;
	for (int v = lo; v < hi; v++) { int c = cnt[v]; cnt[v] = run; run += c; }
	__syncthreads();
	// stable scatter, blockDim.x positions at a time, one warp after another
	for (int c0 = 0; c0 < N; c0 += blockDim.x) {
		int p = c0 + tid;
		bool ok = p < N;
		int tok = ok ? ids[p] : -1 - lane; // a lane past the end groups with nobody
		unsigned same = __match_any_sync(0xffffffff, tok);
		int rank = __popc(same & ((1u << lane) - 1u)), lead = __ffs(same) - 1;
		for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
			if (warp == w) {
				int base = ok ? cnt[tok] : 0;
				if (ok) { perm[base + rank] = p; tokSorted[base + rank] = tok; }
				__syncwarp();
				if (ok && lane == lead) cnt[tok] = base + __popc(same);
			}
			__syncthreads();
		}
	}
	for (int v = tid; v < V; v += blockDim.x) ends[v] = cnt[v]; // each token's run ends there now
}
// k_emb_bwd_sorted: grid (N, ⌈C/blockDim⌉); block (i, y) starts the run of sorted positions
// i…ends[token] sharing a token (and returns unless i is the first of its run); each thread takes a
// column and adds the run's rows into dwte's row one position after another, eight rows' loads
// issued before their adds (the order of the adds is kept).
__global__ void k_emb_bwd_sorted(void* dwte, int ddw, const void* dout, int ddo, const int* perm, const int* tokSorted,
		const int* ends, int N, int C) {
	int i = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
	int tok = tokSorted[i];
	if ((i > 0 && tokSorted[i - 1] == tok) || j >= C) return;
	int e = ends[tok];
	long k = (long)tok * C + j;
	float v = ld(dwte, ddw, k);
	int q = i;
	for (; q + 8 <= e; q += 8) {
		float a[8];
		#pragma unroll
		for (int u = 0; u < 8; u++) a[u] = ld(dout, ddo, (long)perm[q + u] * C + j);
		#pragma unroll
		for (int u = 0; u < 8; u++) v += a[u];
	}
	for (; q < e; q++) v += ld(dout, ddo, (long)perm[q] * C + j);
	st(dwte, ddw, k, v);
}
__global__ void k_embedding_bwd_wpe(void* dwpe, int ddw, const void* dout, int ddo, int B, int T, int C) {
	FOR(i, (long)T * C) {
		float s = 0.f;
		for (int b = 0; b < B; b++) s += ld(dout, ddo, (long)b * T * C + i);
		st(dwpe, ddw, i, ld(dwpe, ddw, i) + s);
	}
}

// Softmax over rows of C, warp per row; causal: row r sees columns j <= r % C.
__global__ void k_softmax(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) {
	long row = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = row * C;
	int n = causal ? (int)(row % C) + 1 : C;
	float m = -INF;
	for (int j = lane; j < n; j += 32) m = fmaxf(m, ld(x, dx, base + j) * scale);
	m = warpMax(m);
	float s = 0.f;
	for (int j = lane; j < n; j += 32) s += expf(ld(x, dx, base + j) * scale - m);
	float inv = 1.f / warpSum(s);
	for (int j = lane; j < C; j += 32)
		st(y, dy, base + j, j < n ? expf(ld(x, dx, base + j) * scale - m) * inv : 0.f);
}
__global__ void k_softmax_bwd(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) {
	long row = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= R) return;
	long base = row * C;
	float dot = 0.f;
	for (int j = lane; j < C; j += 32) dot += ld(y, dyt, base + j) * ld(dyp, ddy, base + j);
	dot = warpSum(dot);
	for (int j = lane; j < C; j += 32)
		st(dxp, ddx, base + j, scale * ld(y, dyt, base + j) * (ld(dyp, ddy, base + j) - dot));
}

// qkv (B,T,3,H,hs) <-> q,k,v (B,H,T,hs). dir 0: split, 1: merge.
__global__ void k_qkv(void* qkv, int dqkv, void* q, int dq, void* k, int dk, void* v, int dv,
		long n, int T, int H, int hs, int dir) {
	int C = H * hs;
	FOR(i, n) {
		long bt = i / (3 * C); int rem = i % (3 * C);
		int part = rem / C, c = rem % C, h = c / hs, d = c % hs;
		long b = bt / T, t = bt % T;
		long o = ((b * H + h) * T + t) * hs + d;
		void* p = part == 0 ? q : (part == 1 ? k : v);
		int dp = part == 0 ? dq : (part == 1 ? dk : dv);
		if (dir == 0) st(p, dp, o, ld(qkv, dqkv, i));
		else st(qkv, dqkv, i, ld(p, dp, o));
	}
}
// src (A,B,C,D) -> dst (A,C,B,D)
__global__ void k_permute0213(void* dst, int dd, const void* src, int ds, long n, int B, int C, int D) {
	FOR(i, n) {
		int d = i % D; long r = i / D;
		int b = r % B; r /= B;
		int c = r % C; long a = r / C;
		st(dst, dd, i, ld(src, ds, ((a * B + b) * C + c) * D + d));
	}
}

// XENT_EX2 (GODDP_XENT_EX2=1, kernelOptions; measured no faster at b16, session 21: off): the cross-entropy's
// exponentials exp(d) (d = a logit minus the row's running max, ≤ 0) as one ex2.approx.ftz of
// d·log2(e) instead of expf's ~8 instructions. k_xent_sm takes two a logit (the sum, then the
// gradient): at b16 the loss head's 823 M logits make 1.65 G of them, ~0.5 ms of an H100's issue
// slots in a 1.52 ms kernel whose bytes need ~1.0. Within ~2^-18 relative of expf where the
// result matters (ex2.approx's few ulp and the rounding of d·log2(e); an f16 gradient carries
// 2^-11) and not its bits; results below 2^-126
// flush to zero (they were below f16's smallest subnormal already, and add nothing to a sum ≥ 1).
// Unset, XENT_EXP is expf itself (the preprocessor's text: the kernels the suite ran).
#ifndef XENT_EX2
#define XENT_EX2 0
#endif
#if XENT_EX2
__device__ __forceinline__ float xent_ex2(float d) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d * 1.4426950408889634f));
	return y;
}
#define XENT_EXP xent_ex2
#else
#define XENT_EXP expf
#endif
// xent_osum8: the online max m and sum s of exp(v − m) over 8 more values (k_xent's 8-wide order).
__device__ __forceinline__ void xent_osum8(const float* v, float& m, float& s) {
	float mx = v[0];
	#pragma unroll
	for (int k = 1; k < 8; k++) mx = fmaxf(mx, v[k]);
	if (mx > m) { s = m == -INF ? 0.f : s * XENT_EXP(m - mx); m = mx; }
	#pragma unroll
	for (int k = 0; k < 8; k++) s += XENT_EXP(v[k] - m);
}
// xent_grad8: the gradient of the 8 logits v at columns j…j+7 in place, target t (< 0: ignored).
__device__ __forceinline__ void xent_grad8(float* v, int j, int t, float scale, float m, float inv) {
	#pragma unroll
	for (int k = 0; k < 8; k++) {
		float g = 0.f;
		if (t >= 0) { g = scale * XENT_EXP(v[k] - m) * inv; if (j + k == t) g -= scale; }
		v[k] = g;
	}
}
// Cross-entropy: one block per row; online max/sum, then loss or gradient (bwd), or both (bwd with
// losses not null: CrossEntropyWithGrad, the same bits as the two launches). Gradient may alias
// logits: every read of the row finishes (block reduction; the loss's read of the target logit
// before the __syncthreads) before the first write.
__global__ void k_xent(float* losses, void* dl, int ddl, const void* logits, int dlg, const int* targets, int V, float scale, int bwd, int vecok) {
	long row = blockIdx.x;
	long base = row * V;
	int t = targets[row];
	float m = -INF, s = 0.f;
	bool vec = vecok != 0; // V % 8 == 0 and 16-byte aligned rows
	if (vec) {
		for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
			float v[8];
			ld8(logits, dlg, base + j, v);
			xent_osum8(v, m, s);
		}
	} else {
		for (int j = threadIdx.x; j < V; j += blockDim.x) {
			float x = ld(logits, dlg, base + j);
			if (x > m) { s = (m == -INF ? 0.f : s * XENT_EXP(m - x)) + 1.f; m = x; }
			else s += XENT_EXP(x - m);
		}
	}
	blockMaxSum(m, s);
	if (!bwd) {
		if (threadIdx.x == 0) losses[row] = t < 0 ? 0.f : logf(s) - (ld(logits, dlg, base + t) - m);
		return;
	}
	if (losses && threadIdx.x == 0) losses[row] = t < 0 ? 0.f : logf(s) - (ld(logits, dlg, base + t) - m);
	__syncthreads();
	float inv = 1.f / s;
	if (vec && ddl == dlg) {
		for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
			float v[8];
			ld8(logits, dlg, base + j, v);
			xent_grad8(v, j, t, scale, m, inv);
			st8(dl, ddl, base + j, v);
		}
		return;
	}
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float g = 0.f;
		if (t >= 0) {
			g = scale * XENT_EXP(ld(logits, dlg, base + j) - m) * inv;
			if (j == t) g -= scale;
		}
		st(dl, ddl, base + j, g);
	}
}
// h8f: eight 16-bit values (the module's half type) to f32, as ld8 converts them.
__device__ __forceinline__ void h8f(uint4 u, float* v) {
	v[0] = h2f(u.x & 0xffff); v[1] = h2f(u.x >> 16); v[2] = h2f(u.y & 0xffff); v[3] = h2f(u.y >> 16);
	v[4] = h2f(u.z & 0xffff); v[5] = h2f(u.z >> 16); v[6] = h2f(u.w & 0xffff); v[7] = h2f(u.w >> 16);
}
// Cross-entropy with its gradient, the row read from memory once (the default; GODDP_XENT_SMEM=0 off): 16-bit
// logits, V % 8 == 0, 16-byte aligned rows, dl of the logits' dtype (it may alias them). Each
// thread takes k_xent's very elements in its order (blockDim 512, 8 at a time), keeps their 16
// raw bytes in shared memory (V·2 bytes dynamic) as it sums, and writes the gradient from there:
// the same max, sum, loss and gradient as k_xent — its bits — where k_xent reads the row a second
// time. Four loads in flight a thread before their stores and sums (the order of the sums is kept);
// at most 64 registers a thread (__launch_bounds__), so two blocks fit an SM's register file too.
__global__ void __launch_bounds__(512, 2) k_xent_sm(float* losses, void* dl, int ddl, const void* logits, int dlg, const int* targets, int V, float scale) {
	extern __shared__ uint4 xsh[];
	long row = blockIdx.x;
	long base = row * V;
	int t = targets[row];
	float m = -INF, s = 0.f;
	const uint4* src = (const uint4*)logits + base / 8;
	int stride = blockDim.x * 8;
	for (int j0 = threadIdx.x * 8; j0 < V; j0 += 4 * stride) {
		uint4 u[4];
		#pragma unroll
		for (int q = 0; q < 4; q++) {
			int j = j0 + q * stride;
			if (j < V) u[q] = __ldcs(src + j / 8);
		}
		#pragma unroll
		for (int q = 0; q < 4; q++) {
			int j = j0 + q * stride;
			if (j >= V) break;
			xsh[j / 8] = u[q];
			float v[8];
			h8f(u[q], v);
			xent_osum8(v, m, s);
		}
	}
	blockMaxSum(m, s);
	__syncthreads(); // the row is in shared memory (the loss reads its target from there)
	if (losses && threadIdx.x == 0) losses[row] = t < 0 ? 0.f : logf(s) - (ld(xsh, dlg, t) - m);
	float inv = 1.f / s;
	for (int j = threadIdx.x * 8; j < V; j += stride) {
		float v[8];
		h8f(xsh[j / 8], v);
		xent_grad8(v, j, t, scale, m, inv);
		st8(dl, ddl, base + j, v);
	}
}
__global__ void k_argmax(int* out, const void* x, int dx, int C) {
	__shared__ float sv[32];
	__shared__ int si[32];
	long base = (long)blockIdx.x * C;
	float bv = -INF; int bi = 0x7fffffff;
	for (int j = threadIdx.x; j < C; j += blockDim.x) {
		float v = ld(x, dx, base + j);
		if (v > bv || bi == 0x7fffffff) { bv = v; bi = j; }
	}
	for (int o = 16; o > 0; o >>= 1) {
		float v2 = __shfl_xor_sync(0xffffffff, bv, o); int i2 = __shfl_xor_sync(0xffffffff, bi, o);
		if (v2 > bv || (v2 == bv && i2 < bi)) { bv = v2; bi = i2; }
	}
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) { sv[w] = bv; si[w] = bi; }
	__syncthreads();
	if (w == 0) {
		bv = lane < nw ? sv[lane] : -INF; bi = lane < nw ? si[lane] : 0x7fffffff;
		for (int o = 16; o > 0; o >>= 1) {
			float v2 = __shfl_xor_sync(0xffffffff, bv, o); int i2 = __shfl_xor_sync(0xffffffff, bi, o);
			if (v2 > bv || (v2 == bv && i2 < bi)) { bv = v2; bi = i2; }
		}
		if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
	}
}

// Sum (sq 0) or sum of squares (sq 1) of x: per-block partials in double, then k_sum_finish.
__global__ void k_sum_part(double* part, const void* x, int dx, long n, int sq) {
	double s = 0.0;
	FOR(i, n) { double v = ld(x, dx, i); s += sq ? v * v : v; }
	s = blockSumD(s);
	if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void k_sum_finish(float* out, const double* part, int nparts) {
	double s = 0.0;
	for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
	s = blockSumD(s);
	if (threadIdx.x == 0) out[0] += (float)s;
}
// k_sum_finish64: k_sum_finish's blocks added into a double accumulator (SumSquaresF64).
__global__ void k_sum_finish64(double* out, const double* part, int nparts) {
	double s = 0.0;
	for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
	s = blockSumD(s);
	if (threadIdx.x == 0) out[0] += s;
}
__global__ void k_unscale(void* x, int dx, long n, float inv, float* found) {
	bool bad = false;
	FOR(i, n) {
		float v = ld(x, dx, i) * inv;
		if (!isfinite(v)) bad = true;
		st(x, dx, i, v);
	}
	if (bad) found[0] = 1.f;
}
// k_unscale_sumsq: k_unscale and k_sum_part's squares in one read of x (f32): x *= inv, found set
// on an inf or NaN, per-block float64 partials of the unscaled values' squares into part. Launched
// on k_sum_part's grid, each thread visits the indices k_sum_part's would in the same order and
// squares the very f32 value k_unscale stores, so k_sum_finish gives SumSquares' bits.
__global__ void k_unscale_sumsq(double* part, float* x, long n, float inv, float* found) {
	bool bad = false;
	double s = 0.0;
	FOR(i, n) {
		float v = x[i] * inv;
		if (!isfinite(v)) bad = true;
		x[i] = v;
		double w = v;
		s += w * w;
	}
	if (bad) found[0] = 1.f;
	s = blockSumD(s);
	if (threadIdx.x == 0) part[blockIdx.x] = s;
}
// k_check_sumsq: k_unscale_sumsq that stores nothing (tensor.UnscaleFolder): found set when an
// x·inv is inf or NaN, and the per-block float64 partials of the squares of the very f32 values
// k_unscale_sumsq would store, on its grid and in its order (k_sum_finish: its bits). x is read
// once and left scaled; AdamW multiplies by inv as it reads it (us).
__global__ void k_check_sumsq(double* part, const float* x, long n, float inv, float* found) {
	bool bad = false;
	double s = 0.0;
	FOR(i, n) {
		float v = x[i] * inv;
		if (!isfinite(v)) bad = true;
		double w = v;
		s += w * w;
	}
	if (bad) found[0] = 1.f;
	s = blockSumD(s);
	if (threadIdx.x == 0) part[blockIdx.x] = s;
}
// k_check: k_unscale that stores nothing (f32 x): found set when an x·inv is inf or NaN.
__global__ void k_check(const float* x, long n, float inv, float* found) {
	bool bad = false;
	FOR(i, n) {
		if (!isfinite(x[i] * inv)) bad = true;
	}
	if (bad) found[0] = 1.f;
}
// adamw1: one element of AdamW (k_adamw, k_adamw_us and their _multi forms) on the gradient
// element gi as the kernel read it, the weight decay wd its run's; h, when given, gets the new
// weight in the compute dtype.
__device__ __forceinline__ void adamw1(float* p, float* m, float* v, half_t* h, long i, float gi,
		float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
	float mi = b1 * m[i] + (1.f - b1) * gi;
	float vi = b2 * v[i] + (1.f - b2) * gi * gi;
	m[i] = mi; v[i] = vi;
	float mh = mi / bc1, vh = vi / bc2;
	float w = p[i];
	w -= lr * (mh / (sqrtf(vh) + eps) + wd * w);
	p[i] = w;
	if (h) h[i] = f2h(w);
}
// adamw_run advances r, a thread's run index, to the run holding element i of a _multi kernel's
// slab (runs[r] = start·2 + decay flag, in order, runs[0] >> 1 == 0; each thread's indices only
// grow, so it walks forward) and returns that run's weight decay.
__device__ __forceinline__ float adamw_run(const long long* runs, int nruns, int& r, long i, float wdecay) {
	while (r + 1 < nruns && (runs[r + 1] >> 1) <= (long long)i) r++;
	return (runs[r] & 1) ? wdecay : 0.f;
}
// gs multiplies each gradient element first (AdamWArgs.GradScale; 1 when none: g·1 is g), the
// product a scaling pass would have written: gradient clipping folded into the step.
__global__ void k_adamw(float* p, const float* g, float* m, float* v, half_t* h, long n,
		float lr, float b1, float b2, float eps, float wd, float bc1, float bc2, float gs) {
	FOR(i, n) adamw1(p, m, v, h, i, g[i] * gs, lr, b1, b2, eps, wd, bc1, bc2);
}
// k_adamw_us is k_adamw with us: us, then gs, multiply each gradient element first, each product
// rounded to f32: us is the loss scaler's inverse scale (AdamWArgs.Unscale; 1 when none), the
// value k_unscale would have stored, and gs the clip factor (AdamWArgs.GradScale; 1 when none),
// the product a scaling pass would have written — the unscale and gradient clipping folded into
// the step; g·1 is g, bit for bit. (g·us)·gs: two products, each rounded (no add to contract into).
__global__ void k_adamw_us(float* p, const float* g, float* m, float* v, half_t* h, long n,
		float lr, float b1, float b2, float eps, float wd, float bc1, float bc2, float us, float gs) {
	FOR(i, n) adamw1(p, m, v, h, i, g[i] * us * gs, lr, b1, b2, eps, wd, bc1, bc2);
}
// k_adamw over whole slabs in one launch: runs[r] = start·2 + decay flag for nruns runs in order
// (adamw_run).
__global__ void k_adamw_multi(float* p, const float* g, float* m, float* v, half_t* h, long n,
		const long long* runs, int nruns,
		float lr, float b1, float b2, float eps, float wdecay, float bc1, float bc2, float gs) {
	int r = 0;
	FOR(i, n) {
		float wd = adamw_run(runs, nruns, r, i, wdecay);
		adamw1(p, m, v, h, i, g[i] * gs, lr, b1, b2, eps, wd, bc1, bc2);
	}
}
// k_adamw_multi_us: k_adamw_multi with us (as k_adamw_us).
__global__ void k_adamw_multi_us(float* p, const float* g, float* m, float* v, half_t* h, long n,
		const long long* runs, int nruns,
		float lr, float b1, float b2, float eps, float wdecay, float bc1, float bc2, float us, float gs) {
	int r = 0;
	FOR(i, n) {
		float wd = adamw_run(runs, nruns, r, i, wdecay);
		adamw1(p, m, v, h, i, g[i] * us * gs, lr, b1, b2, eps, wd, bc1, bc2);
	}
}
// sgd1: one element of SGD (k_sgd, k_sgd_multi), the weight decay wd its run's.
__device__ __forceinline__ void sgd1(float* p, const float* g, float* mom, half_t* h, long i, float lr, float mu, float wd, int nesterov) {
	float d = g[i] + wd * p[i];
	if (mom && mu != 0.f) {
		float mi = mu * mom[i] + d;
		mom[i] = mi;
		d = nesterov ? d + mu * mi : mi;
	}
	float w = p[i] - lr * d;
	p[i] = w;
	if (h) h[i] = f2h(w);
}
__global__ void k_sgd(float* p, const float* g, float* mom, half_t* h, long n, float lr, float mu, float wd, int nesterov) {
	FOR(i, n) sgd1(p, g, mom, h, i, lr, mu, wd, nesterov);
}

// k_sgd over whole slabs in one launch, the runs as k_adamw_multi's: k_sgd's arithmetic with the
// weight decay of each element's run.
__global__ void k_sgd_multi(float* p, const float* g, float* mom, half_t* h, long n, const long long* runs, int nruns,
		float lr, float mu, float wdecay, int nesterov) {
	int r = 0;
	FOR(i, n) {
		while (r + 1 < nruns && (runs[r + 1] >> 1) <= (long long)i) r++;
		sgd1(p, g, mom, h, i, lr, mu, (runs[r] & 1) ? wdecay : 0.f, nesterov);
	}
}

// ---- 8-wide variants of the hot elementwise kernels (n8 = n/8 vectors) ----
__global__ void k_cast8(void* y, int dy, const void* x, int dx, int n8) {
	FOR8(i, n8) { float v[8]; ld8(x, dx, i, v); st8(y, dy, i, v); }
}
__global__ void k_scale8(void* x, int dx, int n8, float s) {
	FOR8(i, n8) { float v[8]; ld8(x, dx, i, v);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] *= s;
		st8(x, dx, i, v); }
}
__global__ void k_axpy8(void* y, int dy, const void* x, int dx, int n8, float a) {
	FOR8(i, n8) { float v[8], u[8]; ld8(y, dy, i, v); ld8(x, dx, i, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] += a * u[k];
		st8(y, dy, i, v); }
}
__global__ void k_relu8(void* y, int dy, const void* x, int dx, int n8) {
	FOR8(i, n8) { float v[8]; ld8(x, dx, i, v);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = fmaxf(v[k], 0.f);
		st8(y, dy, i, v); }
}
__global__ void k_relu_bwd8(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, int n8) {
	FOR8(i, n8) { float g[8], u[8]; ld8(dyp, ddy, i, g); ld8(y, dyt, i, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) g[k] = u[k] > 0.f ? g[k] : 0.f;
		st8(dxp, ddx, i, g); }
}
__global__ void k_add8(void* o, int dout, const void* a, int da, const void* b, int db, int n8) {
	FOR8(i, n8) { float v[8], u[8]; ld8(a, da, i, v); ld8(b, db, i, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] += u[k];
		st8(o, dout, i, v); }
}
// k_colsum_part8: k_colsum_part with 8 columns a thread (C a multiple of 8, x 16-byte aligned,
// grid (⌈C/256⌉, parts), block (32, 8)). Each column's sum is added in k_colsum_part's order (rows
// r0+y, r0+y+8, … from 0, then the 8 row phases in y order) with the same rowsPer, so the parts are
// its bits; four rows' loads are issued before their adds, so each thread keeps 64 bytes in flight
// instead of 2 (GODDP_COLSUM_VEC=1; off: −0.3% on an H100 in session 15, inside the noise; docs/perf-gpu.md).
// colsum8_store: a block (32, 8) of 8-column sums s a thread (column group blockIdx.x·256 +
// threadIdx.x·8, rows phase threadIdx.y) into part[blockIdx.y][C]: each column's 8 row phases added
// in y order (k_colsum_part's order).
__device__ __forceinline__ void colsum8_store(const float* s, float* part, int C) {
	__shared__ float sh[8][257];
	// column threadIdx.x·8 + k of the block at sh[y][k·32 + threadIdx.x]: conflict-free stores
	#pragma unroll
	for (int k = 0; k < 8; k++) sh[threadIdx.y][k * 32 + threadIdx.x] = s[k];
	__syncthreads();
	int t = threadIdx.y * 32 + threadIdx.x, c = blockIdx.x * 256 + t;
	if (c < C) {
		float tot = 0.f;
		for (int y = 0; y < 8; y++) tot += sh[y][(t & 7) * 32 + (t >> 3)];
		part[(long)blockIdx.y * C + c] = tot;
	}
}
__global__ void k_colsum_part8(float* part, const void* x, int dx, int R, int C, int rowsPer) {
	int c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
	int r0 = blockIdx.y * rowsPer, r1 = min(R, r0 + rowsPer);
	float s[8];
	#pragma unroll
	for (int k = 0; k < 8; k++) s[k] = 0.f;
	if (c0 < C) {
		int r = r0 + threadIdx.y;
		for (; r + 24 < r1; r += 32) {
			float v[4][8];
			#pragma unroll
			for (int u = 0; u < 4; u++) ld8(x, dx, (long)(r + 8 * u) * C + c0, v[u]);
			#pragma unroll
			for (int u = 0; u < 4; u++)
				#pragma unroll
				for (int k = 0; k < 8; k++) s[k] += v[u][k];
		}
		for (; r < r1; r += 8) {
			float v[8];
			ld8(x, dx, (long)r * C + c0, v);
			#pragma unroll
			for (int k = 0; k < 8; k++) s[k] += v[k];
		}
	}
	colsum8_store(s, part, C);
}
// k_gelu_bwd_colsum8: k_gelu_bwd8 and k_colsum_part8 in one pass (the default; GODDP_GELU_DB_FOLD=0 off): dx =
// gelu'(x)·dy stored as k_gelu_bwd8 stores it, and the column sums of the stored values (rounded
// to dx's dtype, as BiasGrad would read them) into part[blockIdx.y][C] in k_colsum_part's order
// with its rowsPer, so the parts are its bits. Grid (⌈C/256⌉, parts), block (32, 8); C a multiple
// of 8, rows 16-byte aligned; dx may alias dy (each element is read, then written, by one thread).
// Its row loop is k_colsum_part8's with four rows of x and dy loaded before any store.
__global__ void k_gelu_bwd_colsum8(float* part, void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt, int R, int C, int rowsPer) {
	int c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
	int r0 = blockIdx.y * rowsPer, r1 = min(R, r0 + rowsPer);
	float s[8];
	#pragma unroll
	for (int k = 0; k < 8; k++) s[k] = 0.f;
	if (c0 < C) {
		int r = r0 + threadIdx.y;
		for (; r + 24 < r1; r += 32) {
			float v[4][8], g[4][8];
			#pragma unroll
			for (int u = 0; u < 4; u++) {
				long i = (long)(r + 8 * u) * C + c0;
				ld8(x, dxt, i, v[u]);
				ld8(dyp, ddy, i, g[u]);
			}
			#pragma unroll
			for (int u = 0; u < 4; u++) {
				#pragma unroll
				for (int k = 0; k < 8; k++) g[u][k] *= gelu_g(v[u][k]);
				st8(dxp, ddx, (long)(r + 8 * u) * C + c0, g[u]);
				#pragma unroll
				for (int k = 0; k < 8; k++) s[k] += ddx == 0 ? g[u][k] : h2f(f2h(g[u][k]));
			}
		}
		for (; r < r1; r += 8) {
			float v[8], g[8];
			long i = (long)r * C + c0;
			ld8(x, dxt, i, v);
			ld8(dyp, ddy, i, g);
			#pragma unroll
			for (int k = 0; k < 8; k++) g[k] *= gelu_g(v[k]);
			st8(dxp, ddx, i, g);
			#pragma unroll
			for (int k = 0; k < 8; k++) s[k] += ddx == 0 ? g[k] : h2f(f2h(g[k]));
		}
	}
	colsum8_store(s, part, C);
}
__global__ void k_addbias8(void* y, int dy, const void* b, int db, int n8, int C) {
	FOR8(i, n8) { float v[8], u[8]; ld8(y, dy, i, v); ld8(b, db, i % C, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] += u[k];
		st8(y, dy, i, v); }
}
__global__ void k_gelu8(void* y, int dy, const void* x, int dx, int n8) {
	FOR8(i, n8) { float v[8]; ld8(x, dx, i, v);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = gelu_f(v[k]);
		st8(y, dy, i, v); }
}
// k_addbias_gelu8: k_addbias8 on h, then k_gelu8 from h into g, in one pass (tensor.BiasFolder):
// g is GELU of the value h holds after its store, so the two kernels' bits, one read of h fewer.
__global__ void k_addbias_gelu8(void* h, int dh, void* g, int dg, const void* b, int db, int n8, int C) {
	FOR8(i, n8) { float v[8], u[8]; ld8(h, dh, i, v); ld8(b, db, i % C, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] += u[k];
		st8(h, dh, i, v);
		rnd8(dh, v);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = gelu_f(v[k]);
		st8(g, dg, i, v); }
}
// k_addbias_add8: o = x + (y + b) (tensor.BiasFolder): y + b rounded to y's dtype as
// k_addbias8's store leaves it, then k_add8's sum; y itself is not written. The two kernels'
// bits, without y's write and second read.
__global__ void k_addbias_add8(void* o, int dout, const void* x, int dx, const void* y, int dy, const void* b, int db, int n8, int C) {
	FOR8(i, n8) { float v[8], u[8], w[8]; ld8(y, dy, i, v); ld8(b, db, i % C, u); ld8(x, dx, i, w);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] += u[k];
		rnd8(dy, v);
		#pragma unroll
		for (int k = 0; k < 8; k++) w[k] += v[k];
		st8(o, dout, i, w); }
}
__global__ void k_gelu_bwd8(void* dxp, int ddx, const void* dyp, int ddy, const void* x, int dxt, int n8) {
	FOR8(i, n8) { float v[8], g[8]; ld8(x, dxt, i, v); ld8(dyp, ddy, i, g);
		#pragma unroll
		for (int k = 0; k < 8; k++) g[k] *= gelu_g(v[k]);
		st8(dxp, ddx, i, g); }
}
__global__ void k_qkv8(void* qkv, int dqkv, void* q, int dq, void* k, int dk, void* v, int dv,
		int n8, int T, int H, int hs, int dir) {
	int C = H * hs;
	FOR8(i, n8) {
		int bt = i / (3 * C), rem = i - bt * (3 * C);
		int part = rem / C, c = rem - part * C, h = c / hs, d = c - h * hs;
		int b = bt / T, t = bt - b * T;
		long o = ((long)(b * H + h) * T + t) * hs + d;
		void* p = part == 0 ? q : (part == 1 ? k : v);
		int dp = part == 0 ? dq : (part == 1 ? dk : dv);
		float w[8];
		if (dir == 0) { ld8(qkv, dqkv, i, w); st8(p, dp, o, w); }
		else { ld8(p, dp, o, w); st8(qkv, dqkv, i, w); }
	}
}
__global__ void k_permute0213_8(void* dst, int dd, const void* src, int ds, int n8, int B, int C, int D) {
	FOR8(i, n8) {
		int d = i % D, r = i / D;
		int b = r % B; r /= B;
		int c = r % C, a = r / C;
		float w[8];
		ld8(src, ds, ((long)(a * B + b) * C + c) * D + d, w);
		st8(dst, dd, i, w);
	}
}
__global__ void k_layernorm_bwd_r8(LNB_ARGS) { ln_bwd_regs<8>(LNB_PASS); }
__global__ void k_layernorm_bwd_r24(LNB_ARGS) { ln_bwd_regs<24>(LNB_PASS); }
__global__ void k_layernorm_bwd_r32(LNB_ARGS) { ln_bwd_regs<32>(LNB_PASS); }

__global__ void k_ln_fwd8_1(LNF_ARGS) { ln_fwd8<1>(LNF_PASS); }
__global__ void k_ln_fwd8_2(LNF_ARGS) { ln_fwd8<2>(LNF_PASS); }
__global__ void k_ln_fwd8_3(LNF_ARGS) { ln_fwd8<3>(LNF_PASS); }
__global__ void k_ln_fwd8_4(LNF_ARGS) { ln_fwd8<4>(LNF_PASS); }
#define ABLN_ARGS void* o, int dout, void* y2, int dy2, float* mean, float* rstd, const void* x, int dx, \
	const void* y, int dy, const void* bias, int dbias, const void* w, int dw, const void* b, int db, int R, int C, float eps
#define ABLN_PASS o, dout, y2, dy2, mean, rstd, x, dx, y, dy, bias, dbias, w, dw, b, db, R, C, eps
__global__ void k_addbias_add_ln8_1(ABLN_ARGS) { addbias_add_ln8<1>(ABLN_PASS); }
__global__ void k_addbias_add_ln8_2(ABLN_ARGS) { addbias_add_ln8<2>(ABLN_PASS); }
__global__ void k_addbias_add_ln8_3(ABLN_ARGS) { addbias_add_ln8<3>(ABLN_PASS); }
__global__ void k_addbias_add_ln8_4(ABLN_ARGS) { addbias_add_ln8<4>(ABLN_PASS); }
__global__ void k_ln_bwd_dx8_1(LNDX_ARGS) { ln_bwd_dx8<1>(LNDX_PASS); }
__global__ void k_ln_bwd_dx8_2(LNDX_ARGS) { ln_bwd_dx8<2>(LNDX_PASS); }
__global__ void k_ln_bwd_dx8_3(LNDX_ARGS) { ln_bwd_dx8<3>(LNDX_PASS); }
__global__ void k_ln_bwd_dx8_4(LNDX_ARGS) { ln_bwd_dx8<4>(LNDX_PASS); }
#define LNBF_ARGS void* dxp, int ddx, float* part, const void* dyp, int ddy, const void* x, int dxt, \
	const void* w, int dw, const float* mean, const float* rstd, int R, int C, int rowsPer
#define LNBF_PASS dxp, ddx, part, dyp, ddy, x, dxt, w, dw, mean, rstd, R, C, rowsPer
__global__ void k_ln_bwd8f_1(LNBF_ARGS) { ln_bwd8_fused<1>(LNBF_PASS); }
__global__ void k_ln_bwd8f_2(LNBF_ARGS) { ln_bwd8_fused<2>(LNBF_PASS); }
__global__ void k_ln_bwd8f_3(LNBF_ARGS) { ln_bwd8_fused<3>(LNBF_PASS); }
__global__ void k_ln_bwd8f_4(LNBF_ARGS) { ln_bwd8_fused<4>(LNBF_PASS); }
__global__ void k_ln_bwd8fe_1(LNBF_ARGS) { ln_bwd8_fused<1, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fe_2(LNBF_ARGS) { ln_bwd8_fused<2, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fe_3(LNBF_ARGS) { ln_bwd8_fused<3, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fe_4(LNBF_ARGS) { ln_bwd8_fused<4, true>(LNBF_PASS); }
// k_ln_bwd8fs_K: k_ln_bwd8fe_K that also sums the columns of the dx it stores (a third part after
// db's, k_colsum_finish3; tensor.LNBackwardColSummer, GODDP_LN_COLSUM=1; not yet run on a GPU).
__global__ void k_ln_bwd8fs_1(LNBF_ARGS) { ln_bwd8_fused<1, true, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fs_2(LNBF_ARGS) { ln_bwd8_fused<2, true, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fs_3(LNBF_ARGS) { ln_bwd8_fused<3, true, true>(LNBF_PASS); }
__global__ void k_ln_bwd8fs_4(LNBF_ARGS) { ln_bwd8_fused<4, true, true>(LNBF_PASS); }
// dw, db partial sums: block (32, 8); thread (tx, ty) owns columns 8·(blockIdx.x·32+tx) .. +8 over
// rows ty, ty+8, … of its slice; part[slice][0..C) gets dw, part[slice][C..2C) db.
__global__ void k_ln_dwdb8(float* part, const void* dyp, int ddy, const void* x, int dxt, const float* mean,
		const float* rstd, int R, int C, int rowsPer) {
	__shared__ float sh[8][32][17];
	int c8 = blockIdx.x * 32 + threadIdx.x, col = c8 * 8;
	int r0 = blockIdx.y * rowsPer, r1 = min(R, r0 + rowsPer);
	float aw[8], ab[8];
	#pragma unroll
	for (int e = 0; e < 8; e++) { aw[e] = 0.f; ab[e] = 0.f; }
	if (col < C) {
		for (int row = r0 + threadIdx.y; row < r1; row += 8) {
			float xv[8], g[8];
			long base = (long)row * C + col;
			ld8(x, dxt, base, xv);
			ld8(dyp, ddy, base, g);
			float m = mean[row], r = rstd[row];
			#pragma unroll
			for (int e = 0; e < 8; e++) { aw[e] += g[e] * (xv[e] - m) * r; ab[e] += g[e]; }
		}
	}
	#pragma unroll
	for (int e = 0; e < 8; e++) { sh[threadIdx.y][threadIdx.x][e] = aw[e]; sh[threadIdx.y][threadIdx.x][8 + e] = ab[e]; }
	__syncthreads();
	if (threadIdx.y == 0 && col < C) {
		#pragma unroll
		for (int e = 0; e < 16; e++) {
			float t = 0.f;
			for (int k = 0; k < 8; k++) t += sh[k][threadIdx.x][e];
			part[(long)blockIdx.y * 2 * C + (e < 8 ? 0 : C) + col + (e & 7)] = t;
		}
	}
}

__global__ void k_softmax8_1(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) { softmax8<1>(y, dy, x, dx, R, C, scale, causal); }
__global__ void k_softmax_bwd8_1(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) { softmax_bwd8<1>(dxp, ddx, dyp, ddy, y, dyt, R, C, scale); }
__global__ void k_softmax8_2(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) { softmax8<2>(y, dy, x, dx, R, C, scale, causal); }
__global__ void k_softmax_bwd8_2(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) { softmax_bwd8<2>(dxp, ddx, dyp, ddy, y, dyt, R, C, scale); }
__global__ void k_softmax8_4(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) { softmax8<4>(y, dy, x, dx, R, C, scale, causal); }
__global__ void k_softmax_bwd8_4(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) { softmax_bwd8<4>(dxp, ddx, dyp, ddy, y, dyt, R, C, scale); }
__global__ void k_softmax8_8(void* y, int dy, const void* x, int dx, long R, int C, float scale, int causal) { softmax8<8>(y, dy, x, dx, R, C, scale, causal); }
__global__ void k_softmax_bwd8_8(void* dxp, int ddx, const void* dyp, int ddy, const void* y, int dyt, long R, int C, float scale) { softmax_bwd8<8>(dxp, ddx, dyp, ddy, y, dyt, R, C, scale); }

} // extern "C"
`

// vec8Source is ld8 and st8, the 8-wide loads and stores, shared by every module that defines
// h2f and f2h before it (kernelSource, convKernelSource).
const vec8Source = `// 8-wide loads and stores: 16 bytes of f16 or 32 of f32 per thread. i is a multiple of 8 and the
// base is 16-byte aligned (the Go side checks before choosing a *8 kernel).
__device__ __forceinline__ void ld8(const void* p, int dt, long i, float* v) {
	if (dt == 0) {
		float4 a = ((const float4*)p)[i / 4], b = ((const float4*)p)[i / 4 + 1];
		v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
	} else {
		uint4 u = ((const uint4*)p)[i / 8];
		v[0] = h2f(u.x & 0xffff); v[1] = h2f(u.x >> 16); v[2] = h2f(u.y & 0xffff); v[3] = h2f(u.y >> 16);
		v[4] = h2f(u.z & 0xffff); v[5] = h2f(u.z >> 16); v[6] = h2f(u.w & 0xffff); v[7] = h2f(u.w >> 16);
	}
}
__device__ __forceinline__ void st8(void* p, int dt, long i, const float* v) {
	if (dt == 0) {
		((float4*)p)[i / 4] = make_float4(v[0], v[1], v[2], v[3]);
		((float4*)p)[i / 4 + 1] = make_float4(v[4], v[5], v[6], v[7]);
	} else {
		uint4 u;
		u.x = f2h(v[0]) | ((unsigned int)f2h(v[1]) << 16); u.y = f2h(v[2]) | ((unsigned int)f2h(v[3]) << 16);
		u.z = f2h(v[4]) | ((unsigned int)f2h(v[5]) << 16); u.w = f2h(v[6]) | ((unsigned int)f2h(v[7]) << 16);
		((uint4*)p)[i / 8] = u;
	}
}
`

var kernelNameRE = regexp.MustCompile(`__global__ void (?:__launch_bounds__\([^)]*\) )?(k_[a-z0-9_]+)\(`)

// loadKernels compiles (or reads from the cache) the module and looks up every kernel.
func (d *Device) loadKernels() error {
	arch := fmt.Sprintf("compute_%d%d", d.major, d.minor)
	opts := append([]string{"--gpu-architecture=" + arch, "-default-device", "--std=c++17"}, kernelOptions()...)
	ptx, err := d.compileLaunched(kernelSource, opts)
	if err != nil {
		return err
	}
	if d.module, err = cudadrv.LoadPTX(ptx); err != nil {
		return fmt.Errorf("cuda: loading the kernels' PTX: %w", err)
	}
	for _, m := range kernelNameRE.FindAllStringSubmatch(kernelSource, -1) {
		f, err := d.module.Function(m[1])
		if err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		d.fns[m[1]] = f
	}
	return nil
}

// compileCached returns the PTX of src under opts, from the disk cache when present.
func compileCached(src string, opts []string) (string, error) {
	h := sha256.New()
	h.Write([]byte(src))
	for _, o := range opts {
		h.Write([]byte{0})
		h.Write([]byte(o))
	}
	if maj, mnr, err := nvrtc.Version(); err == nil {
		fmt.Fprintf(h, "\x00nvrtc %d.%d", maj, mnr)
	}
	dir := KernelCacheDir()
	path := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))+".ptx")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b), nil
	}
	prog, err := nvrtc.CreateProgram(src, "goddp_kernels.cu")
	if err != nil {
		return "", fmt.Errorf("cuda: nvrtc program: %w", err)
	}
	defer prog.Destroy()
	if err := prog.Compile(opts...); err != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("cuda: compiling kernels: %w\n%s", err, log)
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("cuda: nvrtc PTX: %w", err)
	}
	// The cache is an optimisation: failing to write it is not an error.
	if os.MkdirAll(dir, 0o755) == nil {
		tmp := path + fmt.Sprintf(".%d.tmp", os.Getpid())
		if os.WriteFile(tmp, []byte(ptx), 0o644) == nil {
			os.Rename(tmp, path)
		}
	}
	return ptx, nil
}
