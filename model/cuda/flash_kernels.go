//go:build cuda

package cuda

// flashKernelSource is fused causal attention for head size 64 in f16 with f32 accumulation on
// the tensor cores (mma.sync m16n8k16, sm_80 and later), compiled by NVRTC into its own module
// (flash.go). Nothing of size T×T is ever stored: the forward keeps each row's log-sum-exp,
// the backward recomputes the probabilities from it (FlashAttention-2's scheme, written here from
// the algorithm, not from its code).
//
// Layout: q, k, v are read straight from the QKV projection's output (B,T,3C) — head h's q at
// column h·64, k at C + h·64, v at 2C + h·64 — and y is written straight to (B,T,C) with heads
// side by side, so no split, merge or permute kernels run. The backward writes dq, dk, dv into
// dqkv (B,T,3C) the same way.
//
// Tiles: a block of 4 warps owns 64 rows (queries in the forward and dq kernels, keys in the dk/dv
// kernel; k_flash_fwd128: 8 warps, 128 query rows); each warp owns 16 of them and holds its operand
// rows as mma A fragments in registers.
// The other side streams through shared memory in tiles of 64 rows, rows padded to 72 halves so the
// fragment loads are free of bank conflicts, double-buffered: cp.async fetches tile i+1 while the
// warps compute on tile i. Fragments come out of shared memory with ldmatrix, and with
// ldmatrix.trans where the product needs a tile with its contraction index along the other axis
// (V in P·V, dO in Pᵀ·dO, Q in dSᵀ·Q, K in dS·K), so every tile is stored once, as it is in memory.
//
// mma.sync.m16n8k16 fragments (PTX ISA), g = lane/4, t = lane%4:
//
//	A (16×16, row major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//	B (16×8, k × n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//	C (16×8 f32):         c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
//
// so the C fragments of two adjacent 16×8 score tiles are, packed to f16 pairs, exactly the A
// fragment of the 16×16 probability block the next product needs: P never leaves the registers.
//
// Softmax runs in base 2: scores are multiplied by scale·log2(e) and exponentiated with exp2f; the
// stored log-sum-exp is converted back to natural log (the CPU reference's convention).
const flashKernelSource = `
typedef unsigned short half_t;
typedef unsigned int u32;
#define INF __int_as_float(0x7f800000)
#define HS 64
#define LDS 72
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// The grid's order and the kernels' register budgets, chosen at compile time (flashOptions,
// env.go: GODDP_FLASH_TILE_MAJOR, on by default; GODDP_FLASH_MINBLOCKS). Tile-major grids are
// (B·H, tiles), (tiles, B·H) otherwise: the
// hardware hands out blocks x first, so every (batch, head) gets its longest tile before any gets
// its next — the longest first over the whole grid, not only within one (batch, head), which
// leaves the last wave the shortest tiles. FLASH_*_MINB (",n" when set, empty by default: the
// kernels' bounds exactly as they were) asks ptxas for n resident blocks of 128 threads per SM
// (registers capped to fit).
#ifndef FLASH_TILE_MAJOR
#define FLASH_TILE_MAJOR 0
#endif
#ifndef FLASH_FWD_MINB
#define FLASH_FWD_MINB
#endif
#ifndef FLASH_DQ_MINB
#define FLASH_DQ_MINB
#endif
#ifndef FLASH_DKDV_MINB
#define FLASH_DKDV_MINB
#endif
// FLASH_EX2_FTZ (on unless GODDP_FLASH_EX2=0, flashOptions): the exponentials as one ex2.approx.ftz each,
// where exp2f keeps results below 2^-126 (subnormal) by scaling around the same instruction — a
// compare and two multiplies more per exponential. The kernels' exponentials are probabilities
// that enter f16 (or bf16) products or f32 sums with 1 or more: a subnormal among them is a zero
// there, so the bits are exp2f's (TestCUDA_flashOptionsSameBits passed on an H100, session 20).
#ifndef FLASH_EX2_FTZ
#define FLASH_EX2_FTZ 0
#endif
__device__ __forceinline__ float fexp2(float x) {
#if FLASH_EX2_FTZ
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
#else
	return exp2f(x);
#endif
}
__device__ __forceinline__ int flash_tile() { return FLASH_TILE_MAJOR ? blockIdx.y : blockIdx.x; }
__device__ __forceinline__ int flash_tiles() { return FLASH_TILE_MAJOR ? gridDim.y : gridDim.x; }
__device__ __forceinline__ int flash_bh() { return FLASH_TILE_MAJOR ? blockIdx.x : blockIdx.y; }

__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }
// FLASH_MASK_SPLIT (GODDP_FLASH_MASK_SPLIT=1, flashOptions; the same bits on an H100, session 25): the causal
// mask's per-element tests only on the tiles that cross the diagonal, the others taking a copy of
// the loop without them — the same arithmetic, so the same bits (ptxas 12.4 counts 570
// instructions in k_flash_fwd's tile loop with the tests; cuda-ptx-check.sh LOOPS=1).
#ifndef FLASH_MASK_SPLIT
#define FLASH_MASK_SPLIT 0
#endif
// FLASH_PACK_X2 (GODDP_FLASH_PACK2=1, flashOptions): a pair rounded by one cvt.rn.f16x2.f32 (the
// bf16 module's cvt.rn.bf16x2.f32) instead of two cvt and a shift and an or: the same rounding of
// each value, so the same bits.
#ifndef FLASH_PACK_X2
#define FLASH_PACK_X2 0
#endif
#if FLASH_PACK_X2
__device__ __forceinline__ u32 pack2(float lo, float hi) {
	u32 r;
	` + f16Pack2X + `
	return r;
}
#else
__device__ __forceinline__ u32 pack2(float lo, float hi) { return (u32)f2h(lo) | ((u32)f2h(hi) << 16); }
#endif
__device__ __forceinline__ u32 smem(const void* p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		: "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// load_async starts copying 64 rows of 64 halves (row stride ld halves) into s[64][LDS]; rows
// ≥ nvalid are zero-filled (cp.async with source size 0). Completes at cp_wait.
__device__ __forceinline__ void load_async(half_t* s, const half_t* g, long ld, int nvalid) {
	for (int i = threadIdx.x; i < 512; i += blockDim.x) {
		int r = i >> 3, c = (i & 7) * 8;
		int n = r < nvalid ? 16 : 0;
		const half_t* src = r < nvalid ? g + r * ld + c : g;
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem(s + r * LDS + c)), "l"(src), "r"(n) : "memory");
	}
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm4(u32* r, const half_t* p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem(p)) : "memory");
}
__device__ __forceinline__ void ldsm4t(u32* r, const half_t* p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem(p)) : "memory");
}

// Lane l of ldmatrix.x4 addresses row l%8 of 8×8 matrix l/8.
// ldA: the A fragment of rows row0..+15, columns k0..+15 of a [rows][LDS] tile.
__device__ __forceinline__ void ldA(u32* a, const half_t* s, int row0, int k0, int lane) {
	ldsm4(a, s + (row0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDS + k0 + (lane >> 4) * 8);
}
// ldB2: B fragments (k0..+15) × (n0..+7) in b[0..1] and × (n0+8..+15) in b[2..3], from a tile
// stored [n][k].
__device__ __forceinline__ void ldB2(u32* b, const half_t* s, int n0, int k0, int lane) {
	ldsm4(b, s + (n0 + (lane >> 4) * 8 + (lane & 7)) * LDS + k0 + ((lane >> 3) & 1) * 8);
}
// ldB2t: the same fragments from a tile stored [k][n] (transposed by ldmatrix.trans).
__device__ __forceinline__ void ldB2t(u32* b, const half_t* s, int k0, int n0, int lane) {
	ldsm4t(b, s + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDS + n0 + (lane >> 4) * 8);
}
// ldAt: ldA's fragment (rows row0..+15, columns k0..+15) from a tile stored [k][rows] (transposed
// by ldmatrix.trans: matrix l/8 is a0…a3, rows (l/8)%2, columns l/16 of 8 each, so lane l addresses
// stored row k0 + 8·(l/16) + l%8 at column row0 + 8·((l/8)%2)).
__device__ __forceinline__ void ldAt(u32* a, const half_t* s, int row0, int k0, int lane) {
	ldsm4t(a, s + (k0 + (lane >> 4) * 8 + (lane & 7)) * LDS + row0 + ((lane >> 3) & 1) * 8);
}

// pa: the A fragment (16 rows × 16 columns kk·16..) from the C fragments of 16×8 tiles 2kk, 2kk+1.
__device__ __forceinline__ void pa(u32* a, float (*x)[4], int kk) {
	a[0] = pack2(x[2 * kk][0], x[2 * kk][1]);
	a[1] = pack2(x[2 * kk][2], x[2 * kk][3]);
	a[2] = pack2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
	a[3] = pack2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}

// acc16x64 += A (16×64, four A fragments) · tile, where tile is stored [n][k] (64 n × 64 k).
__device__ __forceinline__ void mm_nk(float (*acc)[4], u32 (*a)[4], const half_t* tile, int lane) {
	#pragma unroll
	for (int j = 0; j < 4; j++)
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			u32 b[4];
			ldB2(b, tile, j * 16, kk * 16, lane);
			mma(acc[2 * j], a[kk], b[0], b[1]);
			mma(acc[2 * j + 1], a[kk], b[2], b[3]);
		}
}

// acc16x64 += P (16×64, as C fragments x) · tile, where tile is stored [k][n] (64 k × 64 n).
__device__ __forceinline__ void mm_pkn(float (*acc)[4], float (*x)[4], const half_t* tile, int lane) {
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		u32 a[4];
		pa(a, x, kk);
		#pragma unroll
		for (int n2 = 0; n2 < 4; n2++) {
			u32 b[4];
			ldB2t(b, tile, kk * 16, n2 * 16, lane);
			mma(acc[2 * n2], a, b[0], b[1]);
			mma(acc[2 * n2 + 1], a, b[2], b[3]);
		}
	}
}

__device__ __forceinline__ void zero8x4(float (*x)[4]) {
	#pragma unroll
	for (int n = 0; n < 8; n++) { x[n][0] = 0.f; x[n][1] = 0.f; x[n][2] = 0.f; x[n][3] = 0.f; }
}

// flash_fwd is the forward for query blocks of NW·16 rows, one warp per 16 (k_flash_fwd: NW = 4,
// 64 rows; k_flash_fwd128: NW = 8, 128 rows, so each key/value tile fetched into shared memory
// serves twice the queries). Keys stream in tiles of 64 either way and every row adds its tiles in
// the same order with the same arithmetic, so both give the same bits; a tile wholly after a
// warp's rows (the 128-row block's last, for its first four warps) adds nothing and is skipped.
// sK, sV: [2][64·LDS] each, the double buffers; the queries pass through sK[1] (and sV[1]).
template <int NW>
__device__ __forceinline__ void flash_fwd(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2, half_t (*sK)[64 * LDS], half_t (*sV)[64 * LDS]) {
	const int BR = NW * 16;
	int qt = flash_tiles() - 1 - flash_tile(); // the longest (most key tiles) first
	int bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	int q0 = qt * BR;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int w0 = q0 + warp * 16; // this warp's first row
	int r0 = w0 + (lane >> 2), r1 = r0 + 8;

	load_async(sK[1], base + (long)q0 * ld, ld, min(64, T - q0)); // q, into the second buffers
	if (NW == 8) load_async(sV[1], q0 + 64 < T ? base + (long)(q0 + 64) * ld : base, ld, min(64, T - q0 - 64)); // no row valid: no byte read
	load_async(sK[0], base + C, ld, min(64, T));
	load_async(sV[0], base + 2 * C, ld, min(64, T));
	cp_commit();
	cp_wait0();
	__syncthreads();
	u32 qa[4][4];
	const half_t* sq = warp < 4 ? sK[1] : sV[1];
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) ldA(qa[kk], sq, (warp & 3) * 16, kk * 16, lane);
	__syncthreads();

	float o[8][4];
	zero8x4(o);
	float m0 = -INF, m1 = -INF, l0 = 0.f, l1 = 0.f;

	int last = min((q0 + BR - 1) / 64, (T - 1) / 64); // the last key tile a row of the block needs
	for (int kt = 0; kt <= last; kt++) {
		int cur = kt & 1;
		if (kt < last) {
			int k1 = (kt + 1) * 64;
			load_async(sK[cur ^ 1], base + C + (long)k1 * ld, ld, min(64, T - k1));
			load_async(sV[cur ^ 1], base + 2 * C + (long)k1 * ld, ld, min(64, T - k1));
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		__syncthreads();

		int k0 = kt * 64;
		if (k0 <= w0 + 15) { // else every key of the tile is after every row of this warp
			float s[8][4];
			zero8x4(s);
			mm_nk(s, qa, sK[cur], lane);
			float mx0 = -INF, mx1 = -INF;
			bool diag = k0 + 63 > w0; // some key of the tile is after some row of this warp
			if (FLASH_MASK_SPLIT && !diag) {
				#pragma unroll
				for (int j = 0; j < 8; j++) {
					#pragma unroll
					for (int i = 0; i < 4; i++) s[j][i] *= sl2;
					mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
					mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
				}
			} else {
				#pragma unroll
				for (int j = 0; j < 8; j++) {
					#pragma unroll
					for (int i = 0; i < 4; i++) {
						int key = k0 + j * 8 + t4 * 2 + (i & 1);
						float v = s[j][i] * sl2;
						if (diag && key > (i < 2 ? r0 : r1)) v = -INF;
						s[j][i] = v;
					}
					mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
					mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
				}
			}
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 1));
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 2));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 1));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 2));
			// Key 0 is in tile 0 and never masked, so the running max is finite from the first tile on.
			float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
			float a0 = fexp2(m0 - mn0), a1 = fexp2(m1 - mn1);
			m0 = mn0; m1 = mn1;
			float ps0 = 0.f, ps1 = 0.f;
			#pragma unroll
			for (int j = 0; j < 8; j++) {
				s[j][0] = fexp2(s[j][0] - m0); s[j][1] = fexp2(s[j][1] - m0);
				s[j][2] = fexp2(s[j][2] - m1); s[j][3] = fexp2(s[j][3] - m1);
				ps0 += s[j][0] + s[j][1];
				ps1 += s[j][2] + s[j][3];
			}
			l0 = l0 * a0 + ps0;
			l1 = l1 * a1 + ps1;
			#pragma unroll
			for (int n = 0; n < 8; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
			mm_pkn(o, s, sV[cur], lane);
		}
		__syncthreads(); // every warp is done with this buffer before the next prefetch refills it
	}
	l0 += __shfl_xor_sync(0xffffffff, l0, 1);
	l0 += __shfl_xor_sync(0xffffffff, l0, 2);
	l1 += __shfl_xor_sync(0xffffffff, l1, 1);
	l1 += __shfl_xor_sync(0xffffffff, l1, 2);
	float i0 = 1.f / l0, i1 = 1.f / l1;
	half_t* yb = y + (long)b * T * C + h * HS + t4 * 2;
	if (r0 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) *(u32*)(yb + (long)r0 * C + n * 8) = pack2(o[n][0] * i0, o[n][1] * i0);
		if (t4 == 0) lse[(long)bh * T + r0] = (m0 + log2f(l0)) * LN2;
	}
	if (r1 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) *(u32*)(yb + (long)r1 * C + n * 8) = pack2(o[n][2] * i1, o[n][3] * i1);
		if (t4 == 0) lse[(long)bh * T + r1] = (m1 + log2f(l1)) * LN2;
	}
}

// flash_store_dq writes a warp's dq·scale (C fragments, rows r0 and r1 = r0 + 8 of batch b) into
// head h's q columns of dqkv (row stride ld), rows past T skipped: the dq kernels' last step
// (flash_bwd_dq, k_flash_bwd_dq_ds and _ds2, k_flash_wg_dq; NVRTC gives the very code it gave with
// the lines written out in each: scripts/cuda-same-code.sh, session 26).
__device__ __forceinline__ void flash_store_dq(half_t* __restrict__ dqkv, float (*dq)[4], int b, int h, int T, long ld,
		int r0, int r1, int t4, float scale) {
	half_t* out = dqkv + (long)b * T * ld + h * HS + t4 * 2;
	if (r0 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) *(u32*)(out + (long)r0 * ld + n * 8) = pack2(dq[n][0] * scale, dq[n][1] * scale);
	}
	if (r1 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) *(u32*)(out + (long)r1 * ld + n * 8) = pack2(dq[n][2] * scale, dq[n][3] * scale);
	}
}

// flash_dq_tile: dq (a warp's 16 rows row0.., C fragments) += dS·K for one key tile, as mm_pkn(dq,
// dS, K) does it: dS from its stored dSᵀ block st ([key][query], A fragments by ldmatrix.trans),
// K from its tile sk ([key][d]). k_flash_bwd_dq_ds and k_flash_bwd_dq_ds2 call it.
__device__ __forceinline__ void flash_dq_tile(float (*dq)[4], const half_t* st, const half_t* sk, int row0, int lane) {
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		u32 a[4];
		ldAt(a, st, row0, kk * 16, lane);
		#pragma unroll
		for (int n2 = 0; n2 < 4; n2++) {
			u32 bb[4];
			ldB2t(bb, sk, kk * 16, n2 * 16, lane);
			mma(dq[2 * n2], a, bb[0], bb[1]);
			mma(dq[2 * n2 + 1], a, bb[2], bb[3]);
		}
	}
}

// flash_ds_tile: the offset (in halves) of the dSᵀ block of (query tile qt, key tile kt ≤ qt) of
// head bh among n query tiles: each head's n(n+1)/2 blocks of 64×64, query tile by query tile, key
// tiles in order within one — a query tile's blocks are contiguous, in the order dq adds them.
__device__ __forceinline__ long flash_ds_tile(int bh, int n, int qt, int kt) {
	return ((long)bh * (n * (n + 1) / 2) + qt * (qt + 1) / 2 + kt) * 4096L;
}

// delta_row is Σ_d dy·y over one row of one head (64 halves each, 16-byte aligned), in one order:
// k_flash_bwd_delta and k_flash_bwd_dq_delta both call it, so their deltas have the same bits.
__device__ __forceinline__ float delta_row(const half_t* dyr, const half_t* yr) {
	const uint4* a = (const uint4*)dyr;
	const uint4* c = (const uint4*)yr;
	float s = 0.f;
	#pragma unroll
	for (int k = 0; k < 8; k++) {
		uint4 u = a[k], v = c[k];
		const half_t* hu = (const half_t*)&u;
		const half_t* hv = (const half_t*)&v;
		#pragma unroll
		for (int j = 0; j < 8; j++) s += h2f(hu[j]) * h2f(hv[j]);
	}
	return s;
}

// flash_bwd_dq: a block's 64 query rows, warp w's q0+16w…+15, their dq accumulated over the key
// tiles at and below the diagonal, written into dqkv. DELTA (k_flash_bwd_dq_delta): the block first
// makes its rows' delta itself (delta_row, k_flash_bwd_delta's bits) from dy and y, and writes it
// for k_flash_bwd_dkdv, which then runs after it; else it reads k_flash_bwd_delta's.
template <bool DELTA>
__device__ __forceinline__ void flash_bwd_dq(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const half_t* __restrict__ y, const float* __restrict__ lse, float* __restrict__ delta,
		int T, int H, float scale, half_t (*sK)[64 * LDS], half_t (*sV)[64 * LDS], float* sDel) {
	int qt = flash_tiles() - 1 - flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	const half_t* dyb = dy + (long)b * T * C + h * HS;
	int q0 = qt * 64;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int r0 = q0 + warp * 16 + (lane >> 2), r1 = r0 + 8;
	float sl2 = scale * LOG2E;

	load_async(sK[1], base + (long)q0 * ld, ld, min(64, T - q0)); // q
	load_async(sV[1], dyb + (long)q0 * C, C, min(64, T - q0));    // dO
	load_async(sK[0], base + C, ld, min(64, T));
	load_async(sV[0], base + 2 * C, ld, min(64, T));
	cp_commit();
	if (DELTA && threadIdx.x < 64) { // while the tiles load
		int q = q0 + threadIdx.x;
		float s = 0.f;
		if (q < T) {
			s = delta_row(dyb + (long)q * C, y + (long)b * T * C + h * HS + (long)q * C);
			delta[(long)bh * T + q] = s;
		}
		sDel[threadIdx.x] = s;
	}
	cp_wait0();
	__syncthreads();
	u32 qa[4][4], oa[4][4];
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		ldA(qa[kk], sK[1], warp * 16, kk * 16, lane);
		ldA(oa[kk], sV[1], warp * 16, kk * 16, lane);
	}
	__syncthreads();
	float L0 = r0 < T ? lse[(long)bh * T + r0] * LOG2E : 0.f, L1 = r1 < T ? lse[(long)bh * T + r1] * LOG2E : 0.f;
	float D0, D1;
	if (DELTA) {
		D0 = r0 < T ? sDel[r0 - q0] : 0.f;
		D1 = r1 < T ? sDel[r1 - q0] : 0.f;
	} else {
		D0 = r0 < T ? delta[(long)bh * T + r0] : 0.f;
		D1 = r1 < T ? delta[(long)bh * T + r1] : 0.f;
	}
	float dq[8][4];
	zero8x4(dq);

	for (int kt = 0; kt <= qt; kt++) {
		int cur = kt & 1, k0 = kt * 64;
		if (kt < qt) {
			int k1 = k0 + 64, nv = min(64, T - k1);
			load_async(sK[cur ^ 1], base + C + (long)k1 * ld, ld, nv);
			load_async(sV[cur ^ 1], base + 2 * C + (long)k1 * ld, ld, nv);
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		__syncthreads();

		float s[8][4], dp[8][4];
		zero8x4(s);
		zero8x4(dp);
		mm_nk(s, qa, sK[cur], lane);
		mm_nk(dp, oa, sV[cur], lane);
		bool diag = kt == qt;
		#pragma unroll
		for (int j = 0; j < 8; j++)
			#pragma unroll
			for (int i = 0; i < 4; i++) {
				int key = k0 + j * 8 + t4 * 2 + (i & 1);
				float p = fexp2(s[j][i] * sl2 - (i < 2 ? L0 : L1));
				if (diag && key > (i < 2 ? r0 : r1)) p = 0.f;
				s[j][i] = p * (dp[j][i] - (i < 2 ? D0 : D1));
			}
		// dQ += dS·K
		mm_pkn(dq, s, sK[cur], lane);
		__syncthreads();
	}
	flash_store_dq(dqkv, dq, b, h, T, ld, r0, r1, t4, scale);
}

// flash_bwd_dkdv: a block's 64 keys, warp w's k0+16w…+15, their dk, dv accumulated over the query
// tiles at and below the diagonal, written into dqkv. DS (k_flash_bwd_dkdv_ds): each query tile's
// dSᵀ, as the f16 (bf16) pairs dK's product takes, is also stored into ds, the (query tile, key
// tile) pair's 64×64 block [key][query] at flash_ds_tile, for k_flash_bwd_dq_ds.
template <bool DS>
__device__ __forceinline__ void flash_bwd_dkdv(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale, half_t (*sQ)[64 * LDS], half_t (*sO)[64 * LDS], float (*sL)[64], float (*sD)[64],
		half_t (*sS)[16 * LDS]) {
	int kt = flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H; // tile 0 (the most query tiles) first
	int C = H * HS, nt = (T + 63) / 64;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	const half_t* dyb = dy + (long)b * T * C + h * HS;
	int k0 = kt * 64;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int kr0 = k0 + warp * 16 + (lane >> 2), kr1 = kr0 + 8;
	float sl2 = scale * LOG2E;

	// k and v into the second buffers; the first query tile (the diagonal one) into the first.
	load_async(sQ[1], base + C + (long)k0 * ld, ld, min(64, T - k0));
	load_async(sO[1], base + 2 * C + (long)k0 * ld, ld, min(64, T - k0));
	load_async(sQ[0], base + (long)k0 * ld, ld, min(64, T - k0));
	load_async(sO[0], dyb + (long)k0 * C, C, min(64, T - k0));
	cp_commit();
	if (threadIdx.x < 64) {
		int q = k0 + threadIdx.x;
		sL[0][threadIdx.x] = q < T ? lse[(long)bh * T + q] * LOG2E : INF;
		sD[0][threadIdx.x] = q < T ? delta[(long)bh * T + q] : 0.f;
	}
	cp_wait0();
	__syncthreads();
	u32 ka[4][4], va[4][4];
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		ldA(ka[kk], sQ[1], warp * 16, kk * 16, lane);
		ldA(va[kk], sO[1], warp * 16, kk * 16, lane);
	}
	__syncthreads();
	float dk[8][4], dv[8][4];
	zero8x4(dk);
	zero8x4(dv);

	for (int qt = kt; qt < nt; qt++) {
		int cur = (qt - kt) & 1, q0 = qt * 64;
		if (qt + 1 < nt) {
			int q1 = q0 + 64, nv = min(64, T - q1);
			load_async(sQ[cur ^ 1], base + (long)q1 * ld, ld, nv);
			load_async(sO[cur ^ 1], dyb + (long)q1 * C, C, nv);
			cp_commit();
			if (threadIdx.x < 64) {
				int q = q1 + threadIdx.x;
				sL[cur ^ 1][threadIdx.x] = q < T ? lse[(long)bh * T + q] * LOG2E : INF;
				sD[cur ^ 1][threadIdx.x] = q < T ? delta[(long)bh * T + q] : 0.f;
			}
			cp_wait1();
		} else {
			cp_wait0();
		}
		__syncthreads();

		// Sᵀ = K·Qᵀ (16 keys × 64 queries per warp), then Pᵀ.
		float st[8][4];
		zero8x4(st);
		mm_nk(st, ka, sQ[cur], lane);
		bool diag = qt == kt;
		if (FLASH_MASK_SPLIT) { // the probabilities, then the diagonal tile's masked ones zeroed
			#pragma unroll
			for (int j = 0; j < 8; j++)
				#pragma unroll
				for (int i = 0; i < 4; i++) st[j][i] = fexp2(st[j][i] * sl2 - sL[cur][j * 8 + t4 * 2 + (i & 1)]);
			if (diag) {
				#pragma unroll
				for (int j = 0; j < 8; j++)
					#pragma unroll
					for (int i = 0; i < 4; i++)
						if (q0 + j * 8 + t4 * 2 + (i & 1) < (i < 2 ? kr0 : kr1)) st[j][i] = 0.f;
			}
		} else {
			#pragma unroll
			for (int j = 0; j < 8; j++)
				#pragma unroll
				for (int i = 0; i < 4; i++) {
					int c = j * 8 + t4 * 2 + (i & 1);
					float p = fexp2(st[j][i] * sl2 - sL[cur][c]);
					if (diag && q0 + c < (i < 2 ? kr0 : kr1)) p = 0.f;
					st[j][i] = p;
				}
		}
		// dV += Pᵀ·dO
		mm_pkn(dv, st, sO[cur], lane);
		// dPᵀ = V·dOᵀ; dSᵀ = Pᵀ∘(dPᵀ − delta)
		float dp[8][4];
		zero8x4(dp);
		mm_nk(dp, va, sO[cur], lane);
		#pragma unroll
		for (int j = 0; j < 8; j++)
			#pragma unroll
			for (int i = 0; i < 4; i++) st[j][i] *= dp[j][i] - sD[cur][j * 8 + t4 * 2 + (i & 1)];
		if (DS) { // rows: this warp's 16 keys; columns: the tile's 64 queries
			// The pairs into the warp's rows of sS (conflict-free: word 36g + 4j + t), then each
			// lane writes four 16-byte pieces of them, a warp's store 512 contiguous bytes, past L2's
			// keeping (st.global.cs): dq reads them once.
			half_t* w = sS[warp];
			#pragma unroll
			for (int j = 0; j < 8; j++) {
				*(u32*)(w + (lane >> 2) * LDS + j * 8 + t4 * 2) = pack2(st[j][0], st[j][1]);
				*(u32*)(w + ((lane >> 2) + 8) * LDS + j * 8 + t4 * 2) = pack2(st[j][2], st[j][3]);
			}
			__syncwarp();
			half_t* dst = ds + flash_ds_tile(bh, nt, qt, kt) + warp * 16 * 64;
			#pragma unroll
			for (int k = 0; k < 4; k++) {
				int c = lane + 32 * k, r = c >> 3, c8 = (c & 7) * 8;
				uint4 v = *(const uint4*)(w + r * LDS + c8);
				asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(dst + r * 64 + c8), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
			}
			// the loop's __syncthreads orders these reads before the next tile's writes
		}
		// dK += dSᵀ·Q
		mm_pkn(dk, st, sQ[cur], lane);
		__syncthreads();
	}
	half_t* out = dqkv + (long)b * T * ld + h * HS + t4 * 2;
	if (kr0 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) {
			*(u32*)(out + (long)kr0 * ld + C + n * 8) = pack2(dk[n][0] * scale, dk[n][1] * scale);
			*(u32*)(out + (long)kr0 * ld + 2 * C + n * 8) = pack2(dv[n][0], dv[n][1]);
		}
	}
	if (kr1 < T) {
		#pragma unroll
		for (int n = 0; n < 8; n++) {
			*(u32*)(out + (long)kr1 * ld + C + n * 8) = pack2(dk[n][2] * scale, dk[n][3] * scale);
			*(u32*)(out + (long)kr1 * ld + 2 * C + n * 8) = pack2(dv[n][2], dv[n][3]);
		}
	}
}

extern "C" {

// k_flash_fwd: ⌈T/64⌉ tiles × B·H (flash_tile, flash_bh: the grid's order), 128 threads. y (B,T,C) f16, lse (B,H,T) f32 natural log.
// sl2 = scale·log2(e).
__global__ void __launch_bounds__(128 FLASH_FWD_MINB) k_flash_fwd(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2) {
	__shared__ __align__(16) half_t sK[2][64 * LDS];
	__shared__ __align__(16) half_t sV[2][64 * LDS];
	flash_fwd<4>(y, lse, qkv, T, H, sl2, sK, sV);
}

// k_flash_fwd128: k_flash_fwd with query blocks of 128 rows: ⌈T/128⌉ tiles, 256 threads
// (model.flash_forward_rows: 128; the same bits as k_flash_fwd, its test passed on a GPU).
__global__ void __launch_bounds__(256) k_flash_fwd128(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2) {
	__shared__ __align__(16) half_t sK[2][64 * LDS];
	__shared__ __align__(16) half_t sV[2][64 * LDS];
	flash_fwd<8>(y, lse, qkv, T, H, sl2, sK, sV);
}

// k_flash_bwd_delta: delta (B,H,T) f32 = Σ_d dy·y per row and head (dy, y (B,T,C) f16). n = B·T·H.
__global__ void k_flash_bwd_delta(float* __restrict__ delta, const half_t* __restrict__ dy,
		const half_t* __restrict__ y, int T, int H, long n) {
	long stride = (long)gridDim.x * blockDim.x;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += stride) {
		int h = (int)(i % H);
		long bt = i / H;
		float s = delta_row(dy + bt * H * HS + h * HS, y + bt * H * HS + h * HS);
		long b = bt / T, t = bt % T;
		delta[(b * H + h) * T + t] = s;
	}
}

// k_flash_bwd_delta8: k_flash_bwd_delta with eight lanes to a row (the default; GODDP_FLASH_DELTA8=0
// takes k_flash_bwd_delta; its test passed on an H100 in session 23): lane j of a group of eight loads the row's 16-byte piece j of dy and of y, so a
// warp's loads are four rows, 512 contiguous bytes each (k_flash_bwd_delta: 32 rows 128 bytes apart,
// each load instruction touching 32 lines). The sum is delta_row's, term by term in its order: lane
// j adds its eight products to the running sum lane j−1 hands it (a shuffle), lane 7 ends with the
// row's delta — the same additions of the same exact products (an f16 or bf16 product is exact in
// f32), so the same bits. n = B·T·H rows; 8·n threads.
__global__ void k_flash_bwd_delta8(float* __restrict__ delta, const half_t* __restrict__ dy,
		const half_t* __restrict__ y, int T, int H, long n) {
	long stride = (long)gridDim.x * blockDim.x;
	int j = threadIdx.x & 7;
	// Every lane of a warp runs the same number of iterations (the bound is rounded up to whole
	// warps: whole warps of rows), so the shuffles see all 32 lanes; lanes past n compute on zeros.
	long total = ((8 * n + 31) / 32) * 32;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += stride) {
		long row = i >> 3;
		bool ok = row < n;
		uint4 u = {0u, 0u, 0u, 0u}, v = {0u, 0u, 0u, 0u};
		if (ok) {
			u = ((const uint4*)(dy + row * HS))[j];
			v = ((const uint4*)(y + row * HS))[j];
		}
		const half_t* hu = (const half_t*)&u;
		const half_t* hv = (const half_t*)&v;
		float s = 0.f;
		#pragma unroll
		for (int k = 0; k < 8; k++) {
			if (j == k) {
				#pragma unroll
				for (int e = 0; e < 8; e++) s += h2f(hu[e]) * h2f(hv[e]);
			}
			float prev = __shfl_up_sync(0xffffffff, s, 1, 8);
			if (j == k + 1) s = prev;
		}
		if (ok && j == 7) {
			int h = (int)(row % H);
			long bt = row / H, b = bt / T, t = bt % T;
			delta[(b * H + h) * T + t] = s;
		}
	}
}

// k_flash_bwd_dkdv: ⌈T/64⌉ key tiles × B·H, 128 threads; warp w owns keys k0+16w…+15 and
// accumulates their dk, dv over the query tiles at and below the diagonal. Writes dk, dv into dqkv.
__global__ void __launch_bounds__(128 FLASH_DKDV_MINB) k_flash_bwd_dkdv(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		int T, int H, float scale) {
	__shared__ __align__(16) half_t sQ[2][64 * LDS];
	__shared__ __align__(16) half_t sO[2][64 * LDS];
	__shared__ float sL[2][64], sD[2][64];
	flash_bwd_dkdv<false>(dqkv, qkv, dy, lse, delta, 0, T, H, scale, sQ, sO, sL, sD, 0);
}

// k_flash_bwd_dkdv_ds: k_flash_bwd_dkdv that also stores every dSᵀ block into ds (flash_ds_tile's
// layout, B·H·n(n+1)/2 blocks of 64×64 for n query tiles) for k_flash_bwd_dq_ds, launched after it
// (the default, GODDP_FLASH_DS=0 off; the same bits on an H100, session 21, but slower then: the
// stores, four bytes a thread at a time, cost dk/dv more than dq saved; staged through sS, −0.31 ms
// a b16 step in session 22).
__global__ void __launch_bounds__(128 FLASH_DKDV_MINB) k_flash_bwd_dkdv_ds(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale) {
	__shared__ __align__(16) half_t sQ[2][64 * LDS];
	__shared__ __align__(16) half_t sO[2][64 * LDS];
	__shared__ float sL[2][64], sD[2][64];
	__shared__ __align__(16) half_t sS[4][16 * LDS]; // each warp's dSᵀ rows on their way out
	flash_bwd_dkdv<true>(dqkv, qkv, dy, lse, delta, ds, T, H, scale, sQ, sO, sL, sD, sS);
}

// k_flash_bwd_dq_ds: dq = scale · Σ_kt dS·K from the dSᵀ blocks k_flash_bwd_dkdv_ds stored —
// nothing recomputed: no scores, no exponentials, no dO·Vᵀ, no delta; ⌈T/64⌉ query tiles × B·H,
// 128 threads, warp w the rows q0+16w…+15 as in k_flash_bwd_dq. The blocks are the f16 (bf16)
// values k_flash_bwd_dq packs from its own dS (the same products, K·Qᵀ in place of Q·Kᵀ, the same
// order, the same roundings), taken as A fragments by ldmatrix.trans, and the product runs in
// mm_pkn's order over kk and the key tiles: the same dq, bit for bit.
__global__ void __launch_bounds__(128) k_flash_bwd_dq_ds(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ ds, int T, int H, float scale) {
	__shared__ __align__(16) half_t sS[2][64 * LDS];
	__shared__ __align__(16) half_t sK[2][64 * LDS];
	int nt = flash_tiles(), qt = nt - 1 - flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	const half_t* dsq = ds + flash_ds_tile(bh, nt, qt, 0); // this query tile's blocks, key tile 0 first
	int q0 = qt * 64;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int r0 = q0 + warp * 16 + (lane >> 2), r1 = r0 + 8;

	load_async(sS[0], dsq, 64, 64);
	load_async(sK[0], base + C, ld, min(64, T));
	cp_commit();
	float dq[8][4];
	zero8x4(dq);
	for (int kt = 0; kt <= qt; kt++) {
		int cur = kt & 1;
		if (kt < qt) {
			int k1 = (kt + 1) * 64;
			load_async(sS[cur ^ 1], dsq + (long)(kt + 1) * 4096, 64, 64);
			load_async(sK[cur ^ 1], base + C + (long)k1 * ld, ld, min(64, T - k1));
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		__syncthreads();
		flash_dq_tile(dq, sS[cur], sK[cur], warp * 16, lane); // dQ += dS·K, as mm_pkn(dq, dS, K) does it
		__syncthreads();
	}
	flash_store_dq(dqkv, dq, b, h, T, ld, r0, r1, t4, scale);
}

// k_flash_bwd_dq_ds2: k_flash_bwd_dq_ds for two query tiles a block (GODDP_FLASH_DQ_PAIR=1, not yet
// run on a GPU): 8 warps, warps 0–3 the rows of query tile 2p, warps 4–7 those of 2p+1, so each
// key tile fetched into shared memory serves both — half the K tiles k_flash_bwd_dq_ds reads again
// from L2 for every query tile (3.1 GB a b16 step beside the 2.6 GB of dS). ⌈n/2⌉ pairs × B·H
// (the longest pair first), 256 threads, dynamic shared memory 6 × 64·LDS halves (55 296 bytes:
// two stages of a K tile and the pair's two dS blocks). Each warp adds its key tiles in
// k_flash_bwd_dq_ds's order with its arithmetic: the same bits.
__global__ void __launch_bounds__(256) k_flash_bwd_dq_ds2(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ ds, int T, int H, float scale) {
	extern __shared__ __align__(16) half_t flash_dyn[];
	half_t (*sS)[64 * LDS] = (half_t (*)[64 * LDS])flash_dyn;                  // [stage·2 + half]
	half_t (*sK)[64 * LDS] = (half_t (*)[64 * LDS])(flash_dyn + 4 * 64 * LDS); // [stage]
	int nt = (T + 63) / 64, pr = flash_tiles() - 1 - flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	int qa = 2 * pr, qb = 2 * pr + 1; // qb == nt: no second tile (n odd)
	bool hasB = qb < nt;
	int last = hasB ? qb : qa; // the last key tile a warp of the block needs
	const half_t* dsa = ds + flash_ds_tile(bh, nt, qa, 0);
	const half_t* dsb = hasB ? ds + flash_ds_tile(bh, nt, qb, 0) : dsa;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int hf = warp >> 2, w4 = warp & 3;
	int qt = hf ? qb : qa;
	int r0 = qt * 64 + w4 * 16 + (lane >> 2), r1 = r0 + 8;

	// Key tile kt into stage st: its K rows, and the dS blocks (qa, kt) where kt ≤ qa and (qb, kt).
	#define DQ2_LOAD(kt, st) do { \
		load_async(sK[st], base + C + (long)(kt) * 64 * ld, ld, min(64, T - (kt) * 64)); \
		if ((kt) <= qa) load_async(sS[2 * (st)], dsa + (long)(kt) * 4096, 64, 64); \
		if (hasB) load_async(sS[2 * (st) + 1], dsb + (long)(kt) * 4096, 64, 64); \
	} while (0)
	DQ2_LOAD(0, 0);
	cp_commit();
	float dq[8][4];
	zero8x4(dq);
	for (int kt = 0; kt <= last; kt++) {
		int cur = kt & 1;
		if (kt < last) {
			DQ2_LOAD(kt + 1, cur ^ 1);
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		__syncthreads();
		if (kt <= qt && qt < nt) flash_dq_tile(dq, sS[2 * cur + hf], sK[cur], w4 * 16, lane);
		__syncthreads();
	}
	#undef DQ2_LOAD
	if (qt < nt) flash_store_dq(dqkv, dq, b, h, T, ld, r0, r1, t4, scale);
}

// k_flash_bwd_dq: ⌈T/64⌉ query tiles × B·H, 128 threads (flash_bwd_dq), delta from
// k_flash_bwd_delta. Writes dq into dqkv.
__global__ void __launch_bounds__(128 FLASH_DQ_MINB) k_flash_bwd_dq(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		int T, int H, float scale) {
	__shared__ __align__(16) half_t sK[2][64 * LDS];
	__shared__ __align__(16) half_t sV[2][64 * LDS];
	flash_bwd_dq<false>(dqkv, qkv, dy, 0, lse, (float*)delta, T, H, scale, sK, sV, 0);
}

// k_flash_bwd_dq_delta: k_flash_bwd_dq that makes its rows' delta itself from dy and y (B,T,C) and
// writes it (B,H,T) for k_flash_bwd_dkdv, launched after it: no k_flash_bwd_delta pass
// (GODDP_FLASH_DELTA_FOLD=1; the same bits on an H100, session 20; no faster there: off).
__global__ void __launch_bounds__(128 FLASH_DQ_MINB) k_flash_bwd_dq_delta(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const half_t* __restrict__ y, const float* __restrict__ lse, float* __restrict__ delta,
		int T, int H, float scale) {
	__shared__ __align__(16) half_t sK[2][64 * LDS];
	__shared__ __align__(16) half_t sV[2][64 * LDS];
	__shared__ float sDel[64];
	flash_bwd_dq<true>(dqkv, qkv, dy, y, lse, delta, T, H, scale, sK, sV, sDel);
}

} // extern "C"
`
