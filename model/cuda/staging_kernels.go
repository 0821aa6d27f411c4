//go:build cuda

package cuda

// stagingKernelSource holds the two kernels of the gradient staging path (staging.go),
// compiled by NVRTC into their own module the first time a plan is made (and cached on disk like
// the device's kernels). Both are grid-stride loops over n elements that move four at a time
// (16-byte f32 and 8-byte f16 accesses) when both pointers allow it.
//
//	k_stage_cast:  dst f16 = round-to-nearest-even(src f32 · scale)   (scale = 1/world size)
//	k_stage_widen: dst f32 = src f16
//
// The cast multiplies in f32 and rounds once, exactly as the host path's encode (allreduce's
// encodeF16 with scale), so the staged path sends the same half bits the host path would. For
// `ddp.wire: bf16` the plan compiles the bf16 instantiation (bf16.go): f16 reads bf16 there.
const stagingKernelSource = `
typedef unsigned short half_t;
typedef unsigned long long u64;

__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }

extern "C" {

__global__ void k_stage_cast(half_t* __restrict__ dst, const float* __restrict__ src, long n, float scale) {
	long tid = blockIdx.x * (long)blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
	long done = 0;
	if (((((u64)src) & 15) | (((u64)dst) & 7)) == 0) {
		long n4 = n >> 2;
		const float4* s4 = (const float4*)src;
		uint2* d4 = (uint2*)dst;
		for (long i = tid; i < n4; i += stride) {
			float4 v = s4[i];
			uint2 o;
			o.x = (unsigned)f2h(__fmul_rn(v.x, scale)) | ((unsigned)f2h(__fmul_rn(v.y, scale)) << 16);
			o.y = (unsigned)f2h(__fmul_rn(v.z, scale)) | ((unsigned)f2h(__fmul_rn(v.w, scale)) << 16);
			d4[i] = o;
		}
		done = n4 << 2;
	}
	for (long i = done + tid; i < n; i += stride) dst[i] = f2h(__fmul_rn(src[i], scale));
}

__global__ void k_stage_widen(float* __restrict__ dst, const half_t* __restrict__ src, long n) {
	long tid = blockIdx.x * (long)blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
	long done = 0;
	if (((((u64)dst) & 15) | (((u64)src) & 7)) == 0) {
		long n4 = n >> 2;
		const uint2* s4 = (const uint2*)src;
		float4* d4 = (float4*)dst;
		for (long i = tid; i < n4; i += stride) {
			uint2 v = s4[i];
			d4[i] = make_float4(h2f((half_t)(v.x & 0xffff)), h2f((half_t)(v.x >> 16)),
			                    h2f((half_t)(v.y & 0xffff)), h2f((half_t)(v.y >> 16)));
		}
		done = n4 << 2;
	}
	for (long i = done + tid; i < n; i += stride) dst[i] = h2f(src[i]);
}

} // extern "C"
`
