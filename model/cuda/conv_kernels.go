//go:build cuda && cudnn

package cuda

// convKernelSource is the CUDA C of the convolutional network's own kernels (conv.go): batch
// normalisation, pooling, and the layout moves around cuDNN's convolutions. It is a module of
// its own, compiled by NVRTC and cached like kernels.go's.
//
// Image tensors are NCHW (nhwc 0) or NHWC (nhwc 1): element (n, c, p) of a batch of C channels
// and P = H·W positions sits at (n·C + c)·P + p or at (n·P + p)·C + c. dt is the floating dtype
// (0 f32, 1 f16: tensor.DType's codes); statistics and parameter gradients are f32.
//
// Per-channel reductions (the batch-norm statistics and sums, the bias gradient) run one block
// per tile of channels: blockDim.x channels side by side and blockDim.y rows of the (N·P)
// elements of each (NHWC: a 32×8 tile, so a warp reads 32 neighbouring channels; NCHW: 1×256,
// so a warp reads 32 neighbouring positions of one plane). Each thread adds its rows in order in
// f64, the block adds the rows' partials in row order: every sum is computed in one fixed order,
// so results do not depend on timing.
const convKernelSource = `
typedef unsigned short half_t;

__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ldv(const void* p, int dt, long i) {
	return dt == 0 ? ((const float*)p)[i] : h2f(((const half_t*)p)[i]);
}
__device__ __forceinline__ void stv(void* p, int dt, long i, float v) {
	if (dt == 0) ((float*)p)[i] = v; else ((half_t*)p)[i] = f2h(v);
}
// reluAfter: v rounded to dt, then ReLU'd: what storing v and running k_relu over it gives, bit for
// bit (a negative v that rounds to −0 comes out as fmaxf(−0, 0), as there).
__device__ __forceinline__ float reluAfter(int dt, float v) {
	return fmaxf(dt == 0 ? v : h2f(f2h(v)), 0.f);
}

` + vec8Source + `

// at: the offset of element (n, c, p).
__device__ __forceinline__ long at(int nhwc, long n, long c, long p, long C, long P) {
	return nhwc ? (n * P + p) * C + c : (n * C + c) * P + p;
}
// chanOf: the channel of flat offset i.
__device__ __forceinline__ long chanOf(int nhwc, long i, long C, long P) {
	return nhwc ? i % C : (i / P) % C;
}

// ld8f: eight f32 at p[c..c+7], p + c 16-byte aligned (two 16-byte loads).
__device__ __forceinline__ void ld8f(const float* p, int c, float* v) {
	float4 a = *(const float4*)(p + c), b = *(const float4*)(p + c + 4);
	v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

#define TILE_MAX 256

// tileSum: the sum over this block's rows of v (one value per thread), in row order; valid in
// the threads of row 0. sh is TILE_MAX doubles of shared memory.
__device__ double tileSum(double v, double* sh) {
	int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
	__syncthreads();
	sh[ty * bx + tx] = v;
	__syncthreads();
	double s = 0;
	if (ty == 0)
		for (int r = 0; r < by; r++) s += sh[r * bx + tx];
	__syncthreads();
	return s;
}

// maxpool_fwd: y and arg (the index h·W + w of the maximum within its plane) per output element;
// the window scanned row by row, the first maximum kept (padding never wins), as the CPU does.
template <typename I>
__device__ __forceinline__ void maxpool_fwd(void* y, int* arg, const void* x, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	I n_out = (I)N * C * OH * OW, OP = (I)OH * OW;
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n_out; i += (I)gridDim.x * blockDim.x) {
		I n, c, q;
		if (nhwc) { c = i % C; q = (i / C) % OP; n = i / (C * OP); }
		else { q = i % OP; c = (i / OP) % C; n = i / (OP * C); }
		int oh = q / OW, ow = q % OW;
		float best = 0.f;
		int where = -1;
		for (int kh = 0; kh < KH; kh++) {
			int ih = oh * s - pad + kh;
			if (ih < 0 || ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				int iw = ow * s - pad + kw;
				if (iw < 0 || iw >= W) continue;
				I p = (I)ih * W + iw, HW = (I)H * W;
				float v = ldv(x, dt, nhwc ? (n * HW + p) * C + c : (n * C + c) * HW + p);
				if (where < 0 || v > best) { best = v; where = ih * W + iw; }
			}
		}
		stv(y, dt, i, where < 0 ? __int_as_float(0xff800000) : best);
		arg[i] = where;
	}
}

// maxpool_bwd: dx per input element: the sum, in window order (oh, then ow, ascending), of dy
// over the windows covering it whose maximum it was — the order the CPU's scatter adds in.
template <typename I>
__device__ __forceinline__ void maxpool_bwd(void* dx, const void* dy, const int* arg, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	I n_in = (I)N * C * H * W, HW = (I)H * W, OP = (I)OH * OW;
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n_in; i += (I)gridDim.x * blockDim.x) {
		I n, c, p;
		if (nhwc) { c = i % C; p = (i / C) % HW; n = i / (C * HW); }
		else { p = i % HW; c = (i / HW) % C; n = i / (HW * C); }
		int ih = p / W, iw = p % W;
		// windows oh with oh·s − pad ≤ ih ≤ oh·s − pad + KH − 1
		int oh0 = ih + pad - KH + 1, ow0 = iw + pad - KW + 1;
		oh0 = oh0 <= 0 ? 0 : (oh0 + s - 1) / s;
		ow0 = ow0 <= 0 ? 0 : (ow0 + s - 1) / s;
		int oh1 = min(OH - 1, (ih + pad) / s), ow1 = min(OW - 1, (iw + pad) / s);
		float g = 0.f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				I q = (I)oh * OW + ow;
				I o = nhwc ? (n * OP + q) * C + c : (n * C + c) * OP + q;
				if (arg[o] == (int)p) g += ldv(dy, dt, o);
			}
		stv(dx, dt, i, g);
	}
}

// bnFinish: channel c's batch-norm statistics finished from its mean mf and biased variance v:
// rstd[c] = 1/√(v+eps); the running statistics moved with momentum (the variance unbiased, over
// count − 1) when run is set; pack (4, C), when set, gets mean, rstd, w, b (k_bn_apply8's).
__device__ __forceinline__ void bnFinish(int c, int C, float mf, float v, float* rstd, float* runMean, float* runVar,
		int run, long count, float eps, float momentum, const float* w, const float* b, float* pack) {
	if (run) {
		float unb = count > 1 ? (float)((double)v * (double)count / (double)(count - 1)) : v;
		runMean[c] = (1.f - momentum) * runMean[c] + momentum * mf;
		runVar[c] = (1.f - momentum) * runVar[c] + momentum * unb;
	}
	float r = 1.f / sqrtf(v + eps);
	rstd[c] = r;
	if (pack) {
		pack[c] = mf;
		pack[C + c] = r;
		pack[2 * C + c] = w[c];
		pack[3 * C + c] = b[c];
	}
}

// bnCoef: channel c's backward coefficients packed (5, C) for k_bn_elemt8: mean, rstd, w·rstd,
// sdy/count, sdyx/count (what k_bn_elemt computes per element).
__device__ __forceinline__ void bnCoef(int c, int C, float* pack, float w, float mean, float rstd, float sdy, float sdyx, float count) {
	pack[c] = mean;
	pack[C + c] = rstd;
	pack[2 * C + c] = w * rstd;
	pack[3 * C + c] = sdy / count;
	pack[4 * C + c] = sdyx / count;
}

extern "C" {

// k_bn_stats: mean[c] and var[c] (biased) of x over its N·P elements, two passes (the mean, then
// the squared deviations), f64 sums.
__global__ void k_bn_stats(const void* x, int dt, int nhwc, int N, int C, int P, float* mean, float* var) {
	__shared__ double sh[TILE_MAX];
	__shared__ double mu[32];
	long c = (long)blockIdx.x * blockDim.x + threadIdx.x, M = (long)N * P;
	bool ok = c < C;
	double s = 0;
	for (long j = threadIdx.y; ok && j < M; j += blockDim.y) s += ldv(x, dt, at(nhwc, j / P, c, j % P, C, P));
	s = tileSum(s, sh);
	if (threadIdx.y == 0) mu[threadIdx.x] = s / (double)M;
	__syncthreads();
	double m = mu[threadIdx.x], q = 0;
	for (long j = threadIdx.y; ok && j < M; j += blockDim.y) {
		double d = ldv(x, dt, at(nhwc, j / P, c, j % P, C, P)) - m;
		q += d * d;
	}
	q = tileSum(q, sh);
	if (ok && threadIdx.y == 0) {
		mean[c] = (float)m;
		var[c] = (float)(q / (double)M);
	}
}

// k_chan_part and k_chan_fin: the per-channel reductions split over row chunks (GODDP_BN_SPLIT=1,
// conv.go). k_bn_stats and k_bn_reduce run one block per tile of channels, so an NHWC batch norm
// of 64 channels has 2 blocks on a GPU of 132 SMs, each adding N·P = 802 816 rows (ResNet-50's
// stem at batch 64). Here block (tile, y) adds rows [y·R, (y+1)·R) of its channels (each thread
// its rows in order, the block's rows in row order, f64) into part[y·C + c], and k_chan_fin adds
// the chunks' partials in an order fixed by S: fixed orders still, so results do not depend on
// timing (they differ from the one-block sums in rounding only). The number of chunks S and rows
// R per chunk are the shape's alone (conv.go: chanPlan).
//
// Two sums a channel, the first at part[y·C + c], the second at part[(gridDim.y + y)·C + c];
// part is (2, S, C) f64. what 0, the statistics in one pass: Σa and Σa² (a² of an f16 or f32
// value is exact in f64, and k_chan_fin's Σa²/M − mean² loses nothing that matters for a batch
// norm's inputs: version 1 read x twice, for the mean and then the squared deviations); what 2:
// Σa and Σa·x̂ with x̂ = (x − mean[c])·rstd[c] (a = dy), where a counts only where mask > 0 when
// mask is set (a ReLU's output: its backward folded in, as k_relu_bwd would have masked dy).
__global__ void k_chan_part(int what, const void* a, const void* x, const void* mask, int dt, int nhwc, int N, int C, int P, long R,
		const float* mean, const float* rstd, double* part) {
	__shared__ double sh[TILE_MAX];
	long c = (long)blockIdx.x * blockDim.x + threadIdx.x, M = (long)N * P;
	long j0 = (long)blockIdx.y * R, j1 = min(M, j0 + R);
	bool ok = c < C;
	float fm = (ok && what == 2) ? mean[c] : 0.f, fr = (ok && what == 2) ? rstd[c] : 0.f;
	double s = 0, t = 0;
	for (long j = j0 + threadIdx.y; ok && j < j1; j += blockDim.y) {
		long o = nhwc ? j * C + c : ((j / P) * C + c) * P + j % P;
		double v = ldv(a, dt, o);
		if (mask && !(ldv(mask, dt, o) > 0.f)) v = 0.0;
		s += v;
		if (what == 0) t += v * v;
		else t += v * (double)((ldv(x, dt, o) - fm) * fr);
	}
	s = tileSum(s, sh);
	t = tileSum(t, sh);
	if (ok && threadIdx.y == 0) {
		part[(long)blockIdx.y * C + c] = s;
		part[((long)gridDim.y + blockIdx.y) * C + c] = t;
	}
}

// rows16: the block's rows' sixteen sums (s[0..7] and t[0..7]) of each thread column, each added
// in row order (acc = 0, then row 0, 1, …), the 16·blockDim.x chains spread over all the block's
// threads (version 1 left them to the threads of row 0, eight chains each per sum: a serial tail
// that was a large share of a small layer's block). ps and pt are the chunk's rows of part; cbase the block's first channel. sh
// holds 16·blockDim.x·blockDim.y ≤ 4096 doubles.
__device__ __forceinline__ void rows16(const double* s, const double* t, double* sh, double* ps, double* pt, int cbase, int C) {
	int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
	__syncthreads();
	#pragma unroll
	for (int k = 0; k < 8; k++) {
		sh[(ty * bx + tx) * 16 + k] = s[k];
		sh[(ty * bx + tx) * 16 + 8 + k] = t[k];
	}
	__syncthreads();
	for (int ch = ty * bx + tx; ch < 16 * bx; ch += bx * by) {
		int cx = ch >> 4, q = ch & 15;
		double acc = 0;
		for (int r = 0; r < by; r++) acc += sh[(r * bx + cx) * 16 + q];
		int c = cbase + cx * 8 + (q & 7);
		if (c < C) (q < 8 ? ps : pt)[c] = acc;
	}
}

// acc8: one row's eight values v (and x's xv for what 2) added into the eight sums s and t, as
// k_chan_part adds one: what 0 s += v, t += v²; 2 s += v, t += v·(xv − fm)·fr. u, when set, is
// the row of k_chan_part's mask: v counts where u > 0 (it is changed in place).
__device__ __forceinline__ void acc8(int what, float* v, const float* xv, const float* u, double* s, double* t,
		const float* fm, const float* fr) {
	if (u) {
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = u[k] > 0.f ? v[k] : 0.f;
	}
	if (what == 0) {
		#pragma unroll
		for (int k = 0; k < 8; k++) { double d = v[k]; s[k] += d; t[k] += d * d; }
	} else {
		#pragma unroll
		for (int k = 0; k < 8; k++) { s[k] += v[k]; t[k] += v[k] * (double)((xv[k] - fm[k]) * fr[k]); }
	}
}

// k_chan_part8: k_chan_part on NHWC with C % 8 == 0 (every ResNet-50 layer), eight neighbouring
// channels a thread: 16-byte loads and sixteen independent f64 sums a thread, where
// k_chan_part's warp reads 64 bytes a row and adds one dependent chain. Block (tile, y):
// blockDim.x threads across 8·blockDim.x channels, blockDim.y threads down rows [y·R, (y+1)·R);
// each thread loads two of its rows before adding them (in order), so two loads are in flight.
// The same fixed orders (each thread its rows in order, the block's rows in row order, then
// k_chan_fin's chunk order), so results do not depend on timing. part as k_chan_part's.
__global__ void k_chan_part8(int what, const void* a, const void* x, const void* mask, int dt, int C, long M, long R,
		const float* mean, const float* rstd, double* part) {
	__shared__ double sh[256 * 16];
	int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
	long by = blockDim.y, j0 = (long)blockIdx.y * R, j1 = min(M, j0 + R);
	bool ok = c0 < C;
	double s[8], t[8];
	float fm[8], fr[8];
	#pragma unroll
	for (int k = 0; k < 8; k++) {
		s[k] = 0; t[k] = 0;
		fm[k] = (ok && what == 2) ? mean[c0 + k] : 0.f;
		fr[k] = (ok && what == 2) ? rstd[c0 + k] : 0.f;
	}
	long j = j0 + threadIdx.y;
	for (; ok && j + by < j1; j += 2 * by) {
		float v[8], w[8], xv[8], xw[8], u[8], uw[8];
		ld8(a, dt, j * C + c0, v);
		ld8(a, dt, (j + by) * C + c0, w);
		if (what == 2) {
			ld8(x, dt, j * C + c0, xv);
			ld8(x, dt, (j + by) * C + c0, xw);
		}
		if (mask) {
			ld8(mask, dt, j * C + c0, u);
			ld8(mask, dt, (j + by) * C + c0, uw);
		}
		acc8(what, v, xv, mask ? u : nullptr, s, t, fm, fr);
		acc8(what, w, xw, mask ? uw : nullptr, s, t, fm, fr);
	}
	if (ok && j < j1) {
		float v[8], xv[8], u[8];
		ld8(a, dt, j * C + c0, v);
		if (what == 2) ld8(x, dt, j * C + c0, xv);
		if (mask) ld8(mask, dt, j * C + c0, u);
		acc8(what, v, xv, mask ? u : nullptr, s, t, fm, fr);
	}
	rows16(s, t, sh, part + (long)blockIdx.y * C, part + ((long)gridDim.y + blockIdx.y) * C, blockIdx.x * blockDim.x * 8, C);
}

// k_chan_fin: channel c's S partials of k_chan_part added, in a fixed order: a block of
// blockDim.x channels × blockDim.y lanes, lane l adds chunks l, l + blockDim.y, … in order, then
// the lanes are added in lane order (tileSum), so S of several hundred chunks is not one
// thread's chain of loads. what 0: o1 = the mean over M, o2 = the biased variance Σa²/M − mean²
// (not below 0); 2: o1 = sdy, o2 = sdyx, and dw[c] += sdyx, db[c] += sdy when set (as k_bn_reduce).
// It also does the batch norm's per-channel step after the sums, which would be a launch of its
// own (53 a ResNet-50 step each): what 0 with fin set, k_bn_finish's (o2 gets rstd, the running
// statistics and pack as there, with count M); what 2 with pack set, k_bn_coef's (from sdy, sdyx
// and w, mean, rstd, count). The same float values and operations: the same bits.
__global__ void k_chan_fin(int what, const double* part, int S, int C, long M, float* o1, float* o2,
		float* dw, float* db, int fin, float* runMean, float* runVar, int run, float eps, float momentum,
		const float* w, const float* b, const float* mean, const float* rstd, float count, float* pack) {
	__shared__ double sh[TILE_MAX];
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	bool ok = c < C;
	double sa = 0, sb = 0;
	int by = blockDim.y;
	// eight of the lane's partials loaded before they are added (in the same order): S of
	// several hundred chunks was a chain of dependent loads from L2, ~10 µs a call
	for (int y0 = threadIdx.y; ok && y0 < S; y0 += 8 * by) {
		double pa[8], pb[8];
		#pragma unroll
		for (int u = 0; u < 8; u++) {
			int y = y0 + u * by;
			pa[u] = y < S ? part[(long)y * C + c] : 0.0;
			pb[u] = y < S ? part[((long)S + y) * C + c] : 0.0;
		}
		#pragma unroll
		for (int u = 0; u < 8; u++)
			if (y0 + u * by < S) { sa += pa[u]; sb += pb[u]; }
	}
	sa = tileSum(sa, sh);
	sb = tileSum(sb, sh);
	if (!ok || threadIdx.y != 0) return;
	if (what == 0) {
		double m = sa / (double)M;
		float mf = (float)m, v = (float)fmax(0.0, sb / (double)M - m * m);
		o1[c] = mf;
		if (fin) bnFinish(c, C, mf, v, o2, runMean, runVar, run, M, eps, momentum, w, b, pack);
		else o2[c] = v;
	} else {
		o1[c] = (float)sa;
		o2[c] = (float)sb;
		if (dw) dw[c] += (float)sb;
		if (db) db[c] += (float)sa;
		if (pack) bnCoef(c, C, pack, w[c], mean[c], rstd[c], (float)sa, (float)sb, count);
	}
}

// k_bn_coef: the backward's per-channel coefficients packed for k_bn_elemt8, pack (5, C):
// mean, rstd, w·rstd, sdy/count, sdyx/count — the values k_bn_elemt computes per element.
__global__ void k_bn_coef(float* pack, const float* w, const float* mean, const float* rstd, const float* sdy,
		const float* sdyx, int C, float count) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c < C) bnCoef(c, C, pack, w[c], mean[c], rstd[c], sdy[c], sdyx[c], count);
}

// k_bn_finish: rstd = 1/√(var+eps) in place of var; running statistics moved with momentum (the
// variance unbiased, over count − 1) when run is set.
// pack, when set, gets (4, C): mean, rstd, w, b — what k_bn_apply8 reads as vectors.
__global__ void k_bn_finish(const float* mean, float* var_rstd, float* runMean, float* runVar, int run,
		int C, long count, float eps, float momentum, const float* w, const float* b, float* pack) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c < C) bnFinish(c, C, mean[c], var_rstd[c], var_rstd, runMean, runVar, run, count, eps, momentum, w, b, pack);
}

// k_bn_apply: y = (x − mean[c])·rstd[c]·w[c] + b[c] over n elements, ReLU'd after when relu is
// set (reluAfter: the bits of k_bn_apply then k_relu).
__global__ void k_bn_apply(void* y, const void* x, int dt, int nhwc, long n, int C, int P,
		const float* mean, const float* rstd, const float* w, const float* b, int relu) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long c = chanOf(nhwc, i, C, P);
		float v = (ldv(x, dt, i) - mean[c]) * rstd[c] * w[c] + b[c];
		stv(y, dt, i, relu ? reluAfter(dt, v) : v);
	}
}

// k_bn_apply8: k_bn_apply on NHWC with C % 8 == 0, eight neighbouring channels a thread (16-byte
// loads and stores, the channel found once per eight, in 32 bits): the same arithmetic per
// element. The per-channel values come from k_bn_finish's pack (4, C) as 16-byte loads: with
// four scalar loads per element the pass was bound by instructions at ~1/3 of HBM's bandwidth.
__global__ void k_bn_apply8(void* y, const void* x, int dt, int n8, int C, const float* pack, int relu) {
	int C8 = C / 8;
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		long i = (long)v8 * 8;
		int c = (v8 % C8) * 8;
		float v[8], m[8], r[8], w[8], b[8];
		ld8(x, dt, i, v);
		ld8f(pack, c, m);
		ld8f(pack + C, c, r);
		ld8f(pack + 2 * C, c, w);
		ld8f(pack + 3 * C, c, b);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = (v[k] - m[k]) * r[k] * w[k] + b[k];
		if (relu) {
			#pragma unroll
			for (int k = 0; k < 8; k++) v[k] = reluAfter(dt, v[k]);
		}
		st8(y, dt, i, v);
	}
}

// k_add_relu8: o = max(a + b, 0) over n8 vectors of eight, a, b and o of one dtype: the sum
// rounded to it, then ReLU'd (reluAfter: the bits of k_add8 then k_relu8).
__global__ void k_add_relu8(void* o, const void* a, const void* b, int dt, int n8) {
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		long i = (long)v8 * 8;
		float v[8], u[8];
		ld8(a, dt, i, v);
		ld8(b, dt, i, u);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = reluAfter(dt, v[k] + u[k]);
		st8(o, dt, i, v);
	}
}

// k_add_relu_bwd8: dx = y > 0 ? dx + a : 0 over n8 vectors of eight, one dtype (the bits of
// k_axpy8 with a = 1, then k_relu_bwd8).
__global__ void k_add_relu_bwd8(void* dx, const void* a, const void* y, int dt, int n8) {
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		long i = (long)v8 * 8;
		float v[8], u[8], m[8];
		ld8(dx, dt, i, v);
		ld8(a, dt, i, u);
		ld8(y, dt, i, m);
		#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = m[k] > 0.f ? v[k] + u[k] : 0.f;
		st8(dx, dt, i, v);
	}
}

// k_bn_infer: y = (x − runMean[c])/√(runVar[c]+eps)·w[c] + b[c].
__global__ void k_bn_infer(void* y, const void* x, int dt, int nhwc, long n, int C, int P,
		const float* w, const float* b, const float* runMean, const float* runVar, float eps) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long c = chanOf(nhwc, i, C, P);
		stv(y, dt, i, (ldv(x, dt, i) - runMean[c]) / sqrtf(runVar[c] + eps) * w[c] + b[c]);
	}
}

// k_bn_reduce: sdy[c] = Σdy and sdyx[c] = Σdy·x̂ (x̂ = (x − mean)·rstd), overwritten; dw[c] +=
// sdyx and db[c] += sdy when dw, db are set.
__global__ void k_bn_reduce(const void* dy, const void* x, int dt, int nhwc, int N, int C, int P,
		const float* mean, const float* rstd, float* sdy, float* sdyx, float* dw, float* db) {
	__shared__ double sh[TILE_MAX];
	long c = (long)blockIdx.x * blockDim.x + threadIdx.x, M = (long)N * P;
	bool ok = c < C;
	float m = ok ? mean[c] : 0.f, r = ok ? rstd[c] : 0.f;
	double a = 0, b = 0;
	for (long j = threadIdx.y; ok && j < M; j += blockDim.y) {
		long o = at(nhwc, j / P, c, j % P, C, P);
		double g = ldv(dy, dt, o);
		a += g;
		b += g * (double)((ldv(x, dt, o) - m) * r);
	}
	a = tileSum(a, sh);
	b = tileSum(b, sh);
	if (ok && threadIdx.y == 0) {
		sdy[c] = (float)a;
		sdyx[c] = (float)b;
		if (dw) dw[c] += (float)b;
		if (db) db[c] += (float)a;
	}
}

// k_bn_elemt: dx = w·rstd·(dy − sdy/count − x̂·(sdyx/count)), dy taken as 0 where mask ≤ 0 when mask
// is set (as k_chan_part's). The two quotients are per channel (k_bn_coef's, bit for bit), not
// per element.
__global__ void k_bn_elemt(void* dx, const void* dy, const void* x, const void* mask, int dt, int nhwc, long n, int C, int P,
		const float* w, const float* mean, const float* rstd, const float* sdy, const float* sdyx, float count) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long c = chanOf(nhwc, i, C, P);
		float xh = (ldv(x, dt, i) - mean[c]) * rstd[c];
		float g = (mask && !(ldv(mask, dt, i) > 0.f)) ? 0.f : ldv(dy, dt, i);
		float q1 = sdy[c] / count, q2 = sdyx[c] / count;
		stv(dx, dt, i, w[c] * rstd[c] * (g - q1 - xh * q2));
	}
}

// k_bn_elemt8: k_bn_elemt on NHWC with C % 8 == 0, eight neighbouring channels a thread; dx may
// be dy (each thread reads its eight elements before it writes them), mask as k_bn_elemt's.
// The per-channel values are k_bn_coef's pack (5, C) as 16-byte loads (see k_bn_apply8).
__global__ void k_bn_elemt8(void* dx, const void* dy, const void* x, const void* mask, int dt, int n8, int C,
		const float* pack) {
	int C8 = C / 8;
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		long i = (long)v8 * 8;
		int c = (v8 % C8) * 8;
		float xv[8], g[8], m[8], r[8], wr[8], q1[8], q2[8];
		ld8f(pack, c, m);
		ld8f(pack + C, c, r);
		ld8f(pack + 2 * C, c, wr);
		ld8f(pack + 3 * C, c, q1);
		ld8f(pack + 4 * C, c, q2);
		ld8(x, dt, i, xv);
		ld8(dy, dt, i, g);
		if (mask) {
			float u[8];
			ld8(mask, dt, i, u);
			#pragma unroll
			for (int k = 0; k < 8; k++) g[k] = u[k] > 0.f ? g[k] : 0.f;
		}
		#pragma unroll
		for (int k = 0; k < 8; k++) {
			float xh = (xv[k] - m[k]) * r[k];
			g[k] = wr[k] * (g[k] - q1[k] - xh * q2[k]);
		}
		st8(dx, dt, i, g);
	}
}

// k_chan_sum: out[c] += Σ over N·P of x (a bias gradient).
__global__ void k_chan_sum(float* out, const void* x, int dt, int nhwc, int N, int C, int P) {
	__shared__ double sh[TILE_MAX];
	long c = (long)blockIdx.x * blockDim.x + threadIdx.x, M = (long)N * P;
	bool ok = c < C;
	double a = 0;
	for (long j = threadIdx.y; ok && j < M; j += blockDim.y) a += ldv(x, dt, at(nhwc, j / P, c, j % P, C, P));
	a = tileSum(a, sh);
	if (ok && threadIdx.y == 0) out[c] += (float)a;
}

// k_bias_add: y[i] += b[channel of i]; b of dtype bdt.
__global__ void k_bias_add(void* y, int dt, const void* b, int bdt, int nhwc, long n, int C, int P) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		stv(y, dt, i, ldv(y, dt, i) + ldv(b, bdt, chanOf(nhwc, i, C, P)));
}

// k_maxpool, k_maxpool_bwd (maxpool_fwd and maxpool_bwd with 64-bit indices) and their *32
// twins (32-bit: every tensor under 2^31 elements; the index arithmetic, five divisions an
// element, was most of the stem's pooling time): the same results.
__global__ void k_maxpool(void* y, int* arg, const void* x, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	maxpool_fwd<long>(y, arg, x, dt, nhwc, N, C, H, W, OH, OW, KH, KW, s, pad);
}
__global__ void k_maxpool32(void* y, int* arg, const void* x, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	maxpool_fwd<int>(y, arg, x, dt, nhwc, N, C, H, W, OH, OW, KH, KW, s, pad);
}
__global__ void k_maxpool_bwd(void* dx, const void* dy, const int* arg, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	maxpool_bwd<long>(dx, dy, arg, dt, nhwc, N, C, H, W, OH, OW, KH, KW, s, pad);
}
__global__ void k_maxpool_bwd32(void* dx, const void* dy, const int* arg, int dt, int nhwc, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	maxpool_bwd<int>(dx, dy, arg, dt, nhwc, N, C, H, W, OH, OW, KH, KW, s, pad);
}

// k_maxpool8 and k_maxpool_bwd8: the 32-bit max pools on NHWC with C % 8 == 0, eight
// neighbouring channels of one position a thread (16-byte loads of x, dy and arg; the position's
// index arithmetic once per eight): each channel's comparisons and sums in the scalar kernels'
// order, so the same results.
__global__ void k_maxpool8(void* y, int* arg, const void* x, int dt, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	int C8 = C / 8, n8 = N * OH * OW * C8;
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		int c = (v8 % C8) * 8, q = v8 / C8; // q: the output position n·OH·OW + oh·OW + ow
		int ow = q % OW, oh = (q / OW) % OH, n = q / (OW * OH);
		float best[8], v[8];
		int where[8];
		#pragma unroll
		for (int k = 0; k < 8; k++) { best[k] = 0.f; where[k] = -1; }
		for (int kh = 0; kh < KH; kh++) {
			int ih = oh * s - pad + kh;
			if (ih < 0 || ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				int iw = ow * s - pad + kw;
				if (iw < 0 || iw >= W) continue;
				ld8(x, dt, ((long)(n * H + ih) * W + iw) * C + c, v);
				#pragma unroll
				for (int k = 0; k < 8; k++)
					if (where[k] < 0 || v[k] > best[k]) { best[k] = v[k]; where[k] = ih * W + iw; }
			}
		}
		#pragma unroll
		for (int k = 0; k < 8; k++) best[k] = where[k] < 0 ? __int_as_float(0xff800000) : best[k];
		long o = (long)v8 * 8;
		st8(y, dt, o, best);
		((int4*)arg)[o / 4] = make_int4(where[0], where[1], where[2], where[3]);
		((int4*)arg)[o / 4 + 1] = make_int4(where[4], where[5], where[6], where[7]);
	}
}
__global__ void k_maxpool_bwd8(void* dx, const void* dy, const int* arg, int dt, int N, int C, int H, int W,
		int OH, int OW, int KH, int KW, int s, int pad) {
	int C8 = C / 8, n8 = N * H * W * C8;
	for (int v8 = blockIdx.x * blockDim.x + threadIdx.x; v8 < n8; v8 += gridDim.x * blockDim.x) {
		int c = (v8 % C8) * 8, q = v8 / C8; // q: the input position n·H·W + ih·W + iw
		int iw = q % W, ih = (q / W) % H, n = q / (W * H), p = ih * W + iw;
		int oh0 = ih + pad - KH + 1, ow0 = iw + pad - KW + 1;
		oh0 = oh0 <= 0 ? 0 : (oh0 + s - 1) / s;
		ow0 = ow0 <= 0 ? 0 : (ow0 + s - 1) / s;
		int oh1 = min(OH - 1, (ih + pad) / s), ow1 = min(OW - 1, (iw + pad) / s);
		float g[8], d[8];
		#pragma unroll
		for (int k = 0; k < 8; k++) g[k] = 0.f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				long o = ((long)(n * OH + oh) * OW + ow) * C + c;
				int4 a0 = ((const int4*)arg)[o / 4], a1 = ((const int4*)arg)[o / 4 + 1];
				int a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
				ld8(dy, dt, o, d);
				#pragma unroll
				for (int k = 0; k < 8; k++)
					if (a[k] == p) g[k] += d[k];
			}
		st8(dx, dt, (long)v8 * 8, g);
	}
}

// k_gap: y[n·C + c] = mean over P of x, f64 sums in position order.
__global__ void k_gap(void* y, int ydt, const void* x, int dt, int nhwc, int N, int C, int P) {
	long nc = blockIdx.x * (long)blockDim.x + threadIdx.x;
	if (nc >= (long)N * C) return;
	long n = nc / C, c = nc % C;
	double a = 0;
	for (long p = 0; p < P; p++) a += ldv(x, dt, at(nhwc, n, c, p, C, P));
	stv(y, ydt, nc, (float)(a / (double)P));
}

// k_gap_bwd: dx = dy[n·C + c]·(1/P).
__global__ void k_gap_bwd(void* dx, int dt, const void* dy, int ydt, int nhwc, long n, int C, int P) {
	float inv = 1.f / (float)P;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long c = chanOf(nhwc, i, C, P), nn = i / ((long)C * P); // the image: outermost in both layouts
		stv(dx, dt, i, ldv(dy, ydt, nn * C + c) * inv);
	}
}

// k_w_krsc: a filter (K, C, RS) copied as (K, RS, C), bits unchanged (the channels-last filter
// cuDNN's NHWC convolutions read).
__global__ void k_w_krsc(void* dst, const void* src, int dt, int K, int C, int RS) {
	long n = (long)K * C * RS;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long k = i / ((long)C * RS), c = (i / RS) % C, rs = i % RS;
		long o = (k * RS + rs) * C + c;
		if (dt == 0) ((float*)dst)[o] = ((const float*)src)[i];
		else ((half_t*)dst)[o] = ((const half_t*)src)[i];
	}
}

// k_dw_acc: dw (K, C, RS) f32 += src, src (K, RS, C) when krsc, else (K, C, RS), of dtype dt.
__global__ void k_dw_acc(float* dw, const void* src, int dt, int K, int C, int RS, int krsc) {
	long n = (long)K * C * RS;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long k = i / ((long)C * RS), c = (i / RS) % C, rs = i % RS;
		dw[i] += ldv(src, dt, krsc ? (k * RS + rs) * C + c : i);
	}
}

} // extern "C"
`
