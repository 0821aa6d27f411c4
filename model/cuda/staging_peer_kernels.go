//go:build cuda

package cuda

// peerReduceKernelSource holds the kernel of the sharded staged path's reduce-scatter by device
// copies (staging_peer.go; ddp.shard_reduce: device), compiled by NVRTC into its own module the
// first time a plan connects to its peers. Run on an H100 in session 21 (the all-reduce alone
// bit-identical to the host ring's: TestCUDAPeerCopies_bitIdenticalToHostRing).
//
//	k_stage_ring_sum: per element j of this rank's segment of a bucket, the n ranks' f16 values in
//	                  the ring's order (part k: this rank's own buffer at k = own_at, else scratch
//	                  slot k, or k − 1 past own_at): acc = part 0 as it is, then for each next part
//	                  acc = f16_rn(f32(acc) + f32(part)); writes acc into own[j] and f32(acc)
//	                  into grad[j].
//
// That is allreduce.SumF16, the host ring's arithmetic (every partial sum rounded to half as the
// ring puts it on the wire): __fadd_rn keeps the addition from being contracted or reordered, and
// cvt.rn.f16.f32 rounds to nearest even as the host's conversion does, subnormals included.
const peerReduceKernelSource = `
typedef unsigned short half_t;

__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }

extern "C" {

__global__ void k_stage_ring_sum(half_t* __restrict__ own, float* __restrict__ grad, const half_t* __restrict__ scratch,
                                 long n, long stride, long parts, long own_at) {
	long tid = blockIdx.x * (long)blockDim.x + threadIdx.x, gs = (long)gridDim.x * blockDim.x;
	for (long j = tid; j < n; j += gs) {
		half_t acc = 0;
		for (long k = 0; k < parts; k++) {
			half_t v = k == own_at ? own[j] : scratch[(k < own_at ? k : k - 1) * stride + j];
			acc = k == 0 ? v : f2h(__fadd_rn(h2f(acc), h2f(v)));
		}
		own[j] = acc;
		grad[j] = h2f(acc);
	}
}

} // extern "C"
`
