//go:build cuda

package cuda

// flashWGMMAKernelSource is the attention kernels on Hopper's warpgroup tensor-core instructions
// (wgmma.mma_async, sm_90a): flashKernelSource (its helpers, and its kernels, which this module
// does not launch) followed by the forward (k_flash_wg_fwd, k_flash_wg_fwd128, k_flash_wg_fwdp)
// and the dS-once backward's dk/dv and dq (k_flash_wg_dkdv, k_flash_wg_dq), compiled by NVRTC for
// compute_90a into modules of their own, f16 and its bf16 instantiation (flash_wgmma.go;
// GODDP_FLASH_WGMMA on compute capability 9.0 only). Run on an H100 in session 25: the backward
// the mma.sync kernels' bits, the step −1.76 ms at b16; fwdp,dkdv,dq the default on 9.0 since
// session 26's whole suite (hopperDefault). The mma.sync kernels stay for sm_80/89 and =0.
//
// Why: the mma.sync forward is issue-bound (session 16's Nsight Compute: one instruction every 4.3–5
// cycles a warp); per 64×64 key tile each of its 4 warps issues 64 mma.sync and ~32 ldmatrix for the
// two products. Here a warpgroup (4 warps, 64 query rows) issues 4 wgmma m64n64k16 for S = Q·Kᵀ and
// 4 for O += P·V, reading Q, K and V straight from shared memory (no ldmatrix, no fragments of Q
// held in registers). Those are 96 of the default forward's 570 instructions a tile (ptxas 12.4;
// docs/perf-gpu.md's counts): the softmax and the mask are most of the rest, so the softmax here
// is leaner too (flash_softmax_tile).
//
// Shared memory: each tile is 64 rows of 64 halves = 128 bytes a row, stored with the 128-byte
// swizzle the descriptors name (the 16-byte chunk c of row r at chunk c ^ (r % 8)), each tile on a
// 1024-byte boundary. Q and K are K-major operands (the contraction index, the head dimension,
// along a row): descriptor stride 1024 bytes between groups of 8 rows, a k-step of 16 moves the
// start 32 bytes. V is P·V's B operand with its contraction index (the key) down the rows: an
// MN-major operand (imm-trans-b 1), 8 keys a 1024-byte group, a k-step of 16 keys moves the start
// 2048 bytes; its tile is one 64-wide swizzle atom across, so of the two offsets only the one
// between 8-key groups is used — both are set to 1024 bytes, right under either reading of the
// PTX ISA's MN-major definitions.
//
// Fragments: a wgmma m64nNk16 f32 accumulator gives warp w of the warpgroup rows 16w..16w+15, in
// mma.sync's C layout for each 8-column block — s[j][0..3] is exactly flash_fwd's score fragment
// of the 16×8 tile j — and its A operand from registers is mma.sync's A fragment: pa() and the
// softmax's shape carry over. The backward's results are the mma.sync kernels' very bits (measured
// on an H100, session 25: the tensor cores sum each 16-product slice alike in both instructions);
// the forward's are within its test's bound of theirs, not their bits: its softmax folds the scale
// into its exponentials' fma, so a probability's rounding to 16 bits before P·V may differ.
const flashWGMMAKernelSource = flashKernelSource + `
// ---- Hopper warpgroup kernels (sm_90a) ----

// wg_desc: the low word of the shared-memory matrix descriptor of a 128-byte-swizzled operand
// starting at p: its start address and leading byte offset, both in 16-byte units. The high word
// is the same for every operand here (WG_DESC_HI: stride 1024 bytes, swizzle mode 1, 128 B), so
// the kernels carry the low word alone, a 32-bit value whose k-steps are small adds, and the
// wgmma helpers pair it with the constant.
__device__ __forceinline__ u32 wg_desc(const half_t* p, u32 lead) {
	return ((smem(p) & 0x3FFFF) >> 4) | (lead << 16);
}
#define WG_DESC_HI 0x40000040u
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// The async proxy (wgmma's reads of shared memory) sees what cp.async wrote once the writers fence.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#define WG_D32(d) "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
	"+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
	"+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
	"+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
// The instruction, its operand types the 16-bit dtype's: a bf16 instantiation swaps this one line
// (as bf16.go swaps the mma.sync text).
` + f16WGMMA + `
#define WG_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
// wg_wait0 waits for the warpgroup's committed wgmma; d (their accumulator) is named so that the
// compiler reads it only after the wait.
__device__ __forceinline__ void wg_wait0(float (*d)[4]) {
	asm volatile("wgmma.wait_group.sync.aligned 0;\n" : WG_D32(d) :: "memory");
}
// d (64×64, f32) = or += A·B, A (64×16) and B (16×64) both from shared memory (descriptors), B
// K-major (stored [n][k]).
__device__ __forceinline__ void wg_ss(float (*d)[4], u32 da, u32 db, int acc) {
	asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %34, 0;\nmov.b64 da, {%32, %35};\nmov.b64 db, {%33, %35};\n"
		WG_MMA WG_R32 ", da, db, p, 1, 1, 0, 0;\n}\n"
		: WG_D32(d) : "r"(da), "r"(db), "r"(acc), "r"(WG_DESC_HI));
}
// d += A·B, A (64×16) and B (16×64) from shared memory both stored [k][m] and [k][n] (MN-major:
// imm-trans-a and imm-trans-b 1).
__device__ __forceinline__ void wg_ss_tt(float (*d)[4], u32 da, u32 db) {
	asm volatile("{\n.reg .b64 da, db;\nmov.b64 da, {%32, %34};\nmov.b64 db, {%33, %34};\n"
		WG_MMA WG_R32 ", da, db, 1, 1, 1, 1, 1;\n}\n"
		: WG_D32(d) : "r"(da), "r"(db), "r"(WG_DESC_HI));
}
// d += A·B, A (64×16) from registers (each warp's mma.sync A fragment of its 16 rows), B (16×64)
// from shared memory stored [k][n] (MN-major: imm-trans-b 1).
__device__ __forceinline__ void wg_rs_t(float (*d)[4], const u32* a, u32 db) {
	asm volatile("{\n.reg .b64 db;\nmov.b64 db, {%36, %37};\n"
		WG_MMA WG_R32 ", {%32,%33,%34,%35}, db, 1, 1, 1, 1;\n}\n"
		: WG_D32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(db), "r"(WG_DESC_HI));
}
// load_async_sw: load_async into a 128-byte-swizzled tile of 64 rows × 64 halves (wg_desc's
// layout). Thread t copies the 16-byte piece t % 8 of rows t/8, t/8 + blockDim.x/8, …: with
// blockDim.x a multiple of 64 those rows are 8 apart, so the piece's swizzled place is one
// computation, the addresses step by constants.
__device__ __forceinline__ void load_async_sw(half_t* s, const half_t* g, long ld, int nvalid) {
	int r = threadIdx.x >> 3, c = threadIdx.x & 7, step = blockDim.x >> 3;
	u32 dst = smem(s + r * 64 + ((c ^ (r & 7)) << 3));
	const half_t* src = g + r * ld + c * 8;
	for (; r < 64; r += step, dst += step * 128, src += step * ld) {
		int n = r < nvalid ? 16 : 0;
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(n ? src : g), "r"(n) : "memory");
	}
}

// flash_softmax_tile: the online softmax on one key tile's scores s (a warp's 16 rows r0 = w0 +
// lane/4 and r1 = r0 + 8, C fragments): keys after a row masked (MASK: tiles that reach past w0;
// the others skip the test), the running maxima m (of the scores scaled by sl2) and sums l
// updated, s replaced by its probabilities exp2(s·sl2 − m) — one fma each: the maxima are taken
// on the unscaled scores and scaled after (sl2 > 0 and rounding are monotone, so max(s)·sl2 is
// max(s·sl2) bit for bit), so no pass multiplies the tile by sl2 (flash_fwd's does: its
// probabilities round s·sl2 first, these do not; the same within f32 rounding). a0 and a1 are the
// factors the rows' output accumulators must be rescaled by. Every row needs a key of the tile at
// or before it (its max finite): the callers skip tiles wholly after their rows. Split at run time
// (flash_softmax_tile): ptxas 12.4 counts 469 instructions a tile in k_flash_wg_fwd's loop without
// the masks' tests, 589 with them.
template <bool MASK>
__device__ __forceinline__ void flash_softmax_tile_m(float (*s)[4], int k0, int r0, int r1, int t4, float sl2,
		float& m0, float& m1, float& l0, float& l1, float& a0, float& a1) {
	float mx0 = -INF, mx1 = -INF;
	#pragma unroll
	for (int j = 0; j < 8; j++) {
		if (MASK) {
			#pragma unroll
			for (int i = 0; i < 4; i++)
				if (k0 + j * 8 + t4 * 2 + (i & 1) > (i < 2 ? r0 : r1)) s[j][i] = -INF;
		}
		mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
		mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
	}
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 1));
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 2));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 1));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 2));
	float mn0 = fmaxf(m0, mx0 * sl2), mn1 = fmaxf(m1, mx1 * sl2);
	a0 = fexp2(m0 - mn0); a1 = fexp2(m1 - mn1);
	m0 = mn0; m1 = mn1;
	float ps0 = 0.f, ps1 = 0.f;
	#pragma unroll
	for (int j = 0; j < 8; j++) {
		s[j][0] = fexp2(fmaf(s[j][0], sl2, -m0)); s[j][1] = fexp2(fmaf(s[j][1], sl2, -m0));
		s[j][2] = fexp2(fmaf(s[j][2], sl2, -m1)); s[j][3] = fexp2(fmaf(s[j][3], sl2, -m1));
		ps0 += s[j][0] + s[j][1];
		ps1 += s[j][2] + s[j][3];
	}
	l0 = l0 * a0 + ps0;
	l1 = l1 * a1 + ps1;
}
__device__ __forceinline__ void flash_softmax_tile(float (*s)[4], int k0, int w0, int r0, int r1, int t4, float sl2,
		float& m0, float& m1, float& l0, float& l1, float& a0, float& a1) {
	if (k0 + 63 > w0) flash_softmax_tile_m<true>(s, k0, r0, r1, t4, sl2, m0, m1, l0, l1, a0, a1); // some key after some row
	else flash_softmax_tile_m<false>(s, k0, r0, r1, t4, sl2, m0, m1, l0, l1, a0, a1);
}

// flash_fwd_store: a warp's rows of y (o / l, f16 pairs) and their log-sum-exp (natural log).
__device__ __forceinline__ void flash_fwd_store(half_t* __restrict__ y, float* __restrict__ lse, float (*o)[4],
		float m0, float m1, float l0, float l1, int b, int bh, int h, int T, int C, int r0, int r1, int t4) {
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

// wg_tiles is the kernels' dynamic shared memory from its first 1024-byte boundary, where their
// 64×64 tiles follow one another (the swizzle's atoms must start on such a boundary; the launch
// gives 1024 bytes more than the buffers need: flashWGTiles).
__device__ __forceinline__ half_t* wg_tiles() {
	extern __shared__ __align__(16) unsigned char wg_dyn[];
	return (half_t*)(wg_dyn + ((1024 - (smem(wg_dyn) & 1023)) & 1023));
}

// flash_fwd_wg: flash_fwd for query blocks of NWG·64 rows, one warpgroup per 64, keys in tiles of
// 64. Per key tile each warpgroup that has keys to add computes its scores S = Q·Kᵀ (4 wgmma over
// the head dimension), runs flash_fwd's softmax on them, and adds P·V (4 wgmma over the keys, P
// from registers). A tile wholly after a warpgroup's rows is skipped (warpgroup-uniform: wgmma is
// collective). sQ: NWG tiles; sK, sV: double buffers, all 128-byte swizzled.
template <int NWG>
__device__ __forceinline__ void flash_fwd_wg(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2, half_t* sQ, half_t (*sK)[64 * 64], half_t (*sV)[64 * 64]) {
	const int BR = NWG * 64;
	int qt = flash_tiles() - 1 - flash_tile(); // the longest (most key tiles) first
	int bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	int q0 = qt * BR;
	int wg = threadIdx.x >> 7;
	int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, t4 = lane & 3;
	int g0 = q0 + wg * 64; // this warpgroup's first row
	int w0 = g0 + warp * 16; // this warp's
	int r0 = w0 + (lane >> 2), r1 = r0 + 8;

	#pragma unroll
	for (int i = 0; i < NWG; i++) {
		int qi = q0 + i * 64;
		load_async_sw(sQ + i * 64 * 64, qi < T ? base + (long)qi * ld : base, ld, min(64, T - qi)); // no row valid: no byte read
	}
	load_async_sw(sK[0], base + C, ld, min(64, T));
	load_async_sw(sV[0], base + 2 * C, ld, min(64, T));
	cp_commit();

	float o[8][4], s[8][4];
	zero8x4(o);
	zero8x4(s);
	float m0 = -INF, m1 = -INF, l0 = 0.f, l1 = 0.f;
	const half_t* q = sQ + wg * 64 * 64;

	int last = min((q0 + BR - 1) / 64, (T - 1) / 64); // the last key tile a row of the block needs
	for (int kt = 0; kt <= last; kt++) {
		int cur = kt & 1;
		if (kt < last) {
			int k1 = (kt + 1) * 64;
			load_async_sw(sK[cur ^ 1], base + C + (long)k1 * ld, ld, min(64, T - k1));
			load_async_sw(sV[cur ^ 1], base + 2 * C + (long)k1 * ld, ld, min(64, T - k1));
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		fence_async_smem();
		__syncthreads();

		int k0 = kt * 64;
		if (k0 <= g0 && g0 < T) { // else every key of the tile is after every row of this warpgroup
			wg_fence();
			#pragma unroll
			for (int kk = 0; kk < 4; kk++) wg_ss(s, wg_desc(q + kk * 16, 1), wg_desc(sK[cur] + kk * 16, 1), kk);
			wg_commit();
			wg_wait0(s);
			float a0, a1;
			flash_softmax_tile(s, k0, w0, r0, r1, t4, sl2, m0, m1, l0, l1, a0, a1);
			#pragma unroll
			for (int n = 0; n < 8; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
			u32 pf[4][4];
			#pragma unroll
			for (int kk = 0; kk < 4; kk++) pa(pf[kk], s, kk);
			wg_fence();
			#pragma unroll
			for (int kk = 0; kk < 4; kk++) wg_rs_t(o, pf[kk], wg_desc(sV[cur] + kk * 16 * 64, 64));
			wg_commit();
			wg_wait0(o);
		}
		__syncthreads(); // every warpgroup is done with this buffer before the next prefetch refills it
	}
	flash_fwd_store(y, lse, o, m0, m1, l0, l1, b, bh, h, T, C, r0, r1, t4);
}

// wg_wait0_keep is wg_wait0 for d that also keeps a (the A fragments in flight: wgmma reads its
// register operands asynchronously) from being reused before the wait.
__device__ __forceinline__ void wg_wait0_keep(float (*d)[4], u32 (*a)[4]) {
	asm volatile("wgmma.wait_group.sync.aligned 0;\n" : WG_D32(d),
		"+r"(a[0][0]), "+r"(a[0][1]), "+r"(a[0][2]), "+r"(a[0][3]), "+r"(a[1][0]), "+r"(a[1][1]), "+r"(a[1][2]), "+r"(a[1][3]),
		"+r"(a[2][0]), "+r"(a[2][1]), "+r"(a[2][2]), "+r"(a[2][3]), "+r"(a[3][0]), "+r"(a[3][1]), "+r"(a[3][2]), "+r"(a[3][3]) :: "memory");
}

// flash_bwd_dkdv_wg: flash_bwd_dkdv<true> (the dS-once backward's dk/dv kernel, dSᵀ stored for
// k_flash_bwd_dq_ds) on wgmma: NWG warpgroups, each 64 of the block's NWG·64 keys (its warp w's
// kw0+16w…+15 as there), sharing each query tile's Q and dO in shared memory. Per query tile: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (8 wgmma, K and V held in shared memory as
// K-major A operands, the Q and dO tiles K-major B), then Pᵀ; dV += Pᵀ·dO (4 wgmma, Pᵀ from
// registers, dO MN-major) runs while dSᵀ = Pᵀ∘(dPᵀ − delta) is made and stored; then dK +=
// dSᵀ·Q (Q MN-major). Each element's arithmetic is flash_bwd_dkdv's; the tensor cores' sums of
// each 16-product slice come from another instruction. A warpgroup whose keys are all after a
// query tile's queries (the second's, on the block's first tile) skips it (warpgroup-uniform).
// sK, sV: NWG tiles each; sS: one piece a warp.
template <int NWG>
__device__ __forceinline__ void flash_bwd_dkdv_wg(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale, half_t* sK, half_t* sV, half_t (*sQ)[64 * 64], half_t (*sO)[64 * 64],
		float (*sL)[64], float (*sD)[64], half_t (*sS)[16 * LDS]) {
	int kb = flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H; // block 0 (the most query tiles) first
	int C = H * HS, nt = (T + 63) / 64;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	const half_t* dyb = dy + (long)b * T * C + h * HS;
	int k0 = kb * 64 * NWG, kt = k0 / 64; // the block's first key, and its first query tile
	int wg = threadIdx.x >> 7;
	int kw0 = k0 + wg * 64, kwt = kw0 / 64; // this warpgroup's first key, and its key tile
	int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, t4 = lane & 3;
	int kr0 = kw0 + warp * 16 + (lane >> 2), kr1 = kr0 + 8;
	float sl2 = scale * LOG2E;
	half_t* sk = sK + wg * 64 * 64;
	half_t* sv = sV + wg * 64 * 64;

	#pragma unroll
	for (int i = 0; i < NWG; i++) {
		int ki = k0 + i * 64;
		const half_t* r = ki < T ? base + (long)ki * ld : base; // no row valid: no byte read
		load_async_sw(sK + i * 64 * 64, r + C, ld, min(64, T - ki));
		load_async_sw(sV + i * 64 * 64, r + 2 * C, ld, min(64, T - ki));
	}
	load_async_sw(sQ[0], base + (long)k0 * ld, ld, min(64, T - k0));
	load_async_sw(sO[0], dyb + (long)k0 * C, C, min(64, T - k0));
	cp_commit();
	if (threadIdx.x < 64) {
		int q = k0 + threadIdx.x;
		sL[0][threadIdx.x] = q < T ? lse[(long)bh * T + q] * LOG2E : INF;
		sD[0][threadIdx.x] = q < T ? delta[(long)bh * T + q] : 0.f;
	}
	// The descriptors, made once: a K-major k-step (16 columns, 32 bytes) adds 2 to the start
	// address field (16-byte units), an MN-major one (16 rows, 2048 bytes) 128.
	const u32 dK = wg_desc(sk, 1), dV = wg_desc(sv, 1);
	const u32 dQ0 = wg_desc(sQ[0], 1), dQ1 = wg_desc(sQ[1], 1), dO0 = wg_desc(sO[0], 1), dO1 = wg_desc(sO[1], 1);
	const u32 dQt0 = wg_desc(sQ[0], 64), dQt1 = wg_desc(sQ[1], 64), dOt0 = wg_desc(sO[0], 64), dOt1 = wg_desc(sO[1], 64);
	float dk[8][4], dv[8][4], st[8][4], dp[8][4];
	zero8x4(dk);
	zero8x4(dv);
	zero8x4(st);
	zero8x4(dp);

	for (int qt = kt; qt < nt; qt++) {
		int cur = (qt - kt) & 1, q0 = qt * 64;
		if (qt + 1 < nt) {
			int q1 = q0 + 64, nv = min(64, T - q1);
			load_async_sw(sQ[cur ^ 1], base + (long)q1 * ld, ld, nv);
			load_async_sw(sO[cur ^ 1], dyb + (long)q1 * C, C, nv);
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
		fence_async_smem();
		__syncthreads();
		if (qt < kwt || kw0 >= T) { // every key of this warpgroup after every query of the tile
			__syncthreads();
			continue;
		}

		// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (64 keys × 64 queries each), one group.
		wg_fence();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_ss(st, dK + 2 * kk, (cur ? dQ1 : dQ0) + 2 * kk, kk);
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_ss(dp, dV + 2 * kk, (cur ? dO1 : dO0) + 2 * kk, kk);
		wg_commit();
		wg_wait0(st);
		wg_wait0(dp);
		#pragma unroll
		for (int j = 0; j < 8; j++)
			#pragma unroll
			for (int i = 0; i < 4; i++) st[j][i] = fexp2(st[j][i] * sl2 - sL[cur][j * 8 + t4 * 2 + (i & 1)]);
		if (qt == kwt) { // the diagonal tile: queries before a key contribute nothing (the others skip the tests)
			#pragma unroll
			for (int j = 0; j < 8; j++)
				#pragma unroll
				for (int i = 0; i < 4; i++)
					if (q0 + j * 8 + t4 * 2 + (i & 1) < (i < 2 ? kr0 : kr1)) st[j][i] = 0.f;
		}
		// dV += Pᵀ·dO, in flight while dSᵀ is made
		u32 pf[4][4];
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) pa(pf[kk], st, kk);
		wg_fence();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_rs_t(dv, pf[kk], (cur ? dOt1 : dOt0) + 128 * kk);
		wg_commit();
		#pragma unroll
		for (int j = 0; j < 8; j++)
			#pragma unroll
			for (int i = 0; i < 4; i++) st[j][i] *= dp[j][i] - sD[cur][j * 8 + t4 * 2 + (i & 1)];
		// dSᵀ packed once, for its store and as dK's A fragments (pa's pairs are the store's)
		u32 sf[4][4];
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) pa(sf[kk], st, kk);
		// dK += dSᵀ·Q, in flight with dV's product while dSᵀ goes out
		wg_fence();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_rs_t(dk, sf[kk], (cur ? dQt1 : dQt0) + 128 * kk);
		wg_commit();
		{ // dSᵀ out: rows this warp's 16 keys, columns the tile's 64 queries (flash_bwd_dkdv's store)
			half_t* w = sS[threadIdx.x >> 5];
			#pragma unroll
			for (int j = 0; j < 8; j++) {
				*(u32*)(w + (lane >> 2) * LDS + j * 8 + t4 * 2) = sf[j >> 1][(j & 1) * 2];
				*(u32*)(w + ((lane >> 2) + 8) * LDS + j * 8 + t4 * 2) = sf[j >> 1][(j & 1) * 2 + 1];
			}
			__syncwarp();
			half_t* dst = ds + flash_ds_tile(bh, nt, qt, kwt) + warp * 16 * 64;
			#pragma unroll
			for (int k = 0; k < 4; k++) {
				int c = lane + 32 * k, r = c >> 3, c8 = (c & 7) * 8;
				uint4 v = *(const uint4*)(w + r * LDS + c8);
				asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(dst + r * 64 + c8), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
			}
		}
		wg_wait0_keep(dv, pf); // both groups done; dk and sf kept to here too:
		wg_wait0_keep(dk, sf);
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

// wg_wait1_keep waits until at most one committed wgmma group of the warpgroup is pending (the
// older ones done): s, the older group's accumulator, is then readable; o and a, the pending
// group's accumulator and A fragments, stay untouched until a later wait.
__device__ __forceinline__ void wg_wait1_keep(float (*s)[4], float (*o)[4], u32 (*a)[4]) {
	asm volatile("wgmma.wait_group.sync.aligned 1;\n" : WG_D32(s), "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]),
		"+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), "+f"(o[2][0]), "+f"(o[2][1]), "+f"(o[2][2]), "+f"(o[2][3]),
		"+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), "+f"(o[4][0]), "+f"(o[4][1]), "+f"(o[4][2]), "+f"(o[4][3]),
		"+f"(o[5][0]), "+f"(o[5][1]), "+f"(o[5][2]), "+f"(o[5][3]), "+f"(o[6][0]), "+f"(o[6][1]), "+f"(o[6][2]), "+f"(o[6][3]),
		"+f"(o[7][0]), "+f"(o[7][1]), "+f"(o[7][2]), "+f"(o[7][3]),
		"+r"(a[0][0]), "+r"(a[0][1]), "+r"(a[0][2]), "+r"(a[0][3]), "+r"(a[1][0]), "+r"(a[1][1]), "+r"(a[1][2]), "+r"(a[1][3]),
		"+r"(a[2][0]), "+r"(a[2][1]), "+r"(a[2][2]), "+r"(a[2][3]), "+r"(a[3][0]), "+r"(a[3][1]), "+r"(a[3][2]), "+r"(a[3][3]) :: "memory");
}

// k_flash_wg_fwdp: k_flash_wg_fwd with each key tile's scores issued before the previous tile's
// P·V is added (FlashAttention-3's overlap within a warpgroup): while the tensor cores run
// S_kt = Q·K_ktᵀ and O += P_{kt−1}·V_{kt−1}, the warps wait only for S_kt and run its softmax; O's
// rescale by the new maximum follows once the P·V is in. Each row's operations come in
// k_flash_wg_fwd's order (O·a_kt + P_kt·V_kt, tile after tile), so its bits. The loads run ahead
// by operand: K one tile ahead of the scores, V one tile behind them (V_kt is fetched while S_kt
// runs and used in the next iteration), so two buffers of each suffice. 64 query rows, 128
// threads; ⌈T/64⌉ tiles × B·H.
extern "C" __global__ void __launch_bounds__(128) k_flash_wg_fwdp(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2) {
	half_t* sQ = wg_tiles(); // 5 tiles: Q, K's two stages, V's two
	half_t (*sK)[64 * 64] = (half_t (*)[64 * 64])(sQ + 64 * 64);
	half_t (*sV)[64 * 64] = sK + 2;
	int qt = flash_tiles() - 1 - flash_tile(); // the longest (most key tiles) first
	int bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	int q0 = qt * 64;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int w0 = q0 + warp * 16;
	int r0 = w0 + (lane >> 2), r1 = r0 + 8;
	int last = qt; // q0 < T: the diagonal tile is the last

	load_async_sw(sQ, base + (long)q0 * ld, ld, min(64, T - q0));
	load_async_sw(sK[0], base + C, ld, min(64, T));
	cp_commit();
	load_async_sw(sV[0], base + 2 * C, ld, min(64, T));
	if (last > 0) load_async_sw(sK[1], base + C + 64L * ld, ld, min(64, T - 64));
	cp_commit();
	cp_wait1();
	fence_async_smem();
	__syncthreads();

	float o[8][4], s[8][4];
	zero8x4(o);
	zero8x4(s);
	float m0 = -INF, m1 = -INF, l0 = 0.f, l1 = 0.f, a0, a1;
	u32 pf[4][4];
	wg_fence();
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) wg_ss(s, wg_desc(sQ + kk * 16, 1), wg_desc(sK[0] + kk * 16, 1), kk);
	wg_commit();
	wg_wait0(s);
	flash_softmax_tile(s, 0, w0, r0, r1, t4, sl2, m0, m1, l0, l1, a0, a1);
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) pa(pf[kk], s, kk);

	for (int kt = 1; kt <= last; kt++) {
		int cur = kt & 1;
		// K_{kt+1} into K_{kt−1}'s buffer (its scores are done), V_kt into V_{kt−2}'s (its P·V is in)
		if (kt < last) load_async_sw(sK[cur ^ 1], base + C + (long)(kt + 1) * 64 * ld, ld, min(64, T - (kt + 1) * 64));
		load_async_sw(sV[cur], base + 2 * C + (long)kt * 64 * ld, ld, min(64, T - kt * 64));
		cp_commit();
		cp_wait1(); // K_kt and V_{kt−1}
		fence_async_smem();
		__syncthreads();
		wg_fence();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_ss(s, wg_desc(sQ + kk * 16, 1), wg_desc(sK[cur] + kk * 16, 1), kk);
		wg_commit();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_rs_t(o, pf[kk], wg_desc(sV[cur ^ 1] + kk * 16 * 64, 64));
		wg_commit();
		wg_wait1_keep(s, o, pf); // the scores are in; P·V may still run
		flash_softmax_tile(s, kt * 64, w0, r0, r1, t4, sl2, m0, m1, l0, l1, a0, a1);
		wg_wait0_keep(o, pf);
		#pragma unroll
		for (int n = 0; n < 8; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) pa(pf[kk], s, kk);
		__syncthreads(); // every warp is past this tile's wgmma before the next loads refill their buffers
	}
	cp_wait0(); // V_last
	fence_async_smem();
	__syncthreads();
	wg_fence();
	#pragma unroll
	for (int kk = 0; kk < 4; kk++) wg_rs_t(o, pf[kk], wg_desc(sV[last & 1] + kk * 16 * 64, 64));
	wg_commit();
	wg_wait0_keep(o, pf);
	flash_fwd_store(y, lse, o, m0, m1, l0, l1, b, bh, h, T, C, r0, r1, t4);
}

extern "C" __global__ void __launch_bounds__(128) k_flash_wg_fwd(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2) {
	half_t* sQ = wg_tiles(); // 5 tiles: Q, K's two stages, V's two
	half_t (*sK)[64 * 64] = (half_t (*)[64 * 64])(sQ + 64 * 64);
	flash_fwd_wg<1>(y, lse, qkv, T, H, sl2, sQ, sK, sK + 2);
}

extern "C" __global__ void __launch_bounds__(256) k_flash_wg_fwd128(half_t* __restrict__ y, float* __restrict__ lse,
		const half_t* __restrict__ qkv, int T, int H, float sl2) {
	half_t* sQ = wg_tiles(); // 6 tiles: Q's two, K's two stages, V's two
	half_t (*sK)[64 * 64] = (half_t (*)[64 * 64])(sQ + 2 * 64 * 64);
	flash_fwd_wg<2>(y, lse, qkv, T, H, sl2, sQ, sK, sK + 2);
}

// k_flash_wg_dkdv: k_flash_bwd_dkdv_ds on wgmma (flash_bwd_dkdv_wg<1>): ⌈T/64⌉ key tiles × B·H,
// 128 threads, the same ds blocks for k_flash_bwd_dq_ds; k_flash_wg_dkdv128: two warpgroups, 128
// keys a block (⌈T/128⌉ blocks), each query tile's Q and dO fetched once for both. Their buffers
// (flashWGDKDVShared(NWG) bytes) follow the tiles in the dynamic shared memory (wg_tiles).
template <int NWG>
__device__ __forceinline__ void flash_dkdv_wg_kernel(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale) {
	half_t* sK = wg_tiles();                                       // NWG × 8 KiB
	half_t* sV = sK + NWG * 64 * 64;                               // NWG × 8 KiB
	half_t (*sQ)[64 * 64] = (half_t (*)[64 * 64])(sV + NWG * 64 * 64); // 16 KiB
	half_t (*sO)[64 * 64] = sQ + 2;                                // 16 KiB
	float (*sL)[64] = (float (*)[64])(sO + 2);                     // 512 B
	float (*sD)[64] = sL + 2;                                      // 512 B
	half_t (*sS)[16 * LDS] = (half_t (*)[16 * LDS])(sD + 2);       // a warp's 16 × 72 halves of dSᵀ on their way out
	flash_bwd_dkdv_wg<NWG>(dqkv, qkv, dy, lse, delta, ds, T, H, scale, sK, sV, sQ, sO, sL, sD, sS);
}
extern "C" __global__ void __launch_bounds__(128, 3) k_flash_wg_dkdv(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale) {
	flash_dkdv_wg_kernel<1>(dqkv, qkv, dy, lse, delta, ds, T, H, scale);
}
extern "C" __global__ void __launch_bounds__(256) k_flash_wg_dkdv128(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ delta,
		half_t* __restrict__ ds, int T, int H, float scale) {
	flash_dkdv_wg_kernel<2>(dqkv, qkv, dy, lse, delta, ds, T, H, scale);
}

// k_flash_wg_dq: k_flash_bwd_dq_ds on wgmma: dq = scale · Σ_kt dS·K from the dSᵀ blocks the dk/dv
// kernel stored, one warpgroup, the query tile's 64 rows (warp w's q0+16w…+15 as there). Per key
// tile 4 wgmma, both operands from shared memory with their contraction index (the key) down the
// rows: the dSᵀ block [key][query] as an MN-major A, the K tile [key][d] as an MN-major B, each
// k-step 16 keys (2048 bytes) on. ⌈T/64⌉ query tiles × B·H, 128 threads.
extern "C" __global__ void __launch_bounds__(128) k_flash_wg_dq(half_t* __restrict__ dqkv, const half_t* __restrict__ qkv,
		const half_t* __restrict__ ds, int T, int H, float scale) {
	half_t (*sS)[64 * 64] = (half_t (*)[64 * 64])wg_tiles(); // 4 tiles: dSᵀ's two stages, K's two
	half_t (*sK)[64 * 64] = sS + 2;
	int nt = flash_tiles(), qt = nt - 1 - flash_tile(), bh = flash_bh(), b = bh / H, h = bh % H;
	int C = H * HS;
	long ld = 3L * C;
	const half_t* base = qkv + (long)b * T * ld + h * HS;
	const half_t* dsq = ds + flash_ds_tile(bh, nt, qt, 0); // this query tile's blocks, key tile 0 first
	int q0 = qt * 64;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
	int r0 = q0 + warp * 16 + (lane >> 2), r1 = r0 + 8;

	load_async_sw(sS[0], dsq, 64, 64);
	load_async_sw(sK[0], base + C, ld, min(64, T));
	cp_commit();
	float dq[8][4];
	zero8x4(dq);
	for (int kt = 0; kt <= qt; kt++) {
		int cur = kt & 1;
		if (kt < qt) {
			int k1 = (kt + 1) * 64;
			load_async_sw(sS[cur ^ 1], dsq + (long)(kt + 1) * 4096, 64, 64);
			load_async_sw(sK[cur ^ 1], base + C + (long)k1 * ld, ld, min(64, T - k1));
			cp_commit();
			cp_wait1();
		} else {
			cp_wait0();
		}
		fence_async_smem();
		__syncthreads();
		wg_fence();
		#pragma unroll
		for (int kk = 0; kk < 4; kk++) wg_ss_tt(dq, wg_desc(sS[cur] + kk * 16 * 64, 64), wg_desc(sK[cur] + kk * 16 * 64, 64));
		wg_commit();
		wg_wait0(dq);
		__syncthreads();
	}
	flash_store_dq(dqkv, dq, b, h, T, ld, r0, r1, t4, scale);
}
`
