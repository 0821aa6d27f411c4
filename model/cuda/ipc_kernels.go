//go:build cuda

package cuda

// ipcKernelSource is the all-reduce over CUDA IPC buffers (ipc.go), compiled by NVRTC into its
// own module the first time a reducer is made (and cached on disk like the device's kernels).
//
// k_ipc_allreduce(tab, n, rank, dt, e, scale, div, ctl, halves): one launch per all-reduce (or per
// half of one: halves 1 the reduce, 2 the gather, 3 both; 5 the reduce ending in meet 1; plus 8:
// paced by the stream, below), on the compute
// stream (AllReduce) or a side stream (ipc_async.go: Launch, whose ctl makes every wait abortable). tab is a device table of 5n u64: every rank's buffer (mapped here), every rank's flags,
// the segments' starts and ends by rank, then the order this rank adds in. dt: 0 f32, 1 f16,
// 2 bf16. e: the collective's number (1, 2, …, the same on every rank).
//
//	meet 0   block b of every rank has started (each rank's buffer holds its values: its stream
//	         ran everything before the launch)
//	reduce   this rank's segment: s = Σ over order of value·scale, added in f32 (__fadd_rn, no
//	         contraction), then s/div, rounded once to dt and stored in this rank's buffer
//	meet 1   block b of every rank has reduced: every segment is final where it lives
//	gather   every other rank's segment copied (bits) from that rank's buffer into this one's
//	meet 2   block b of every rank has copied: no rank's next all-reduce (or the caller's next
//	         write of its buffer) can overwrite a segment a peer still reads
//
// The halves apart (ipc_async.go, ReduceScatter and AllGather: the device path across hosts, where
// each rank's segment goes through the ring between hosts between them): halves 1 is meet 0 and
// the reduce, and returns (the rank's own segment is final in its buffer; nobody reads it before
// the gather's meet 1, and the gather's copies into this buffer wait for that meeting, which no
// rank reaches before its reduce has finished on its stream); halves 2 is meet 1 (every rank's
// segment final: its copy back from the host ran before this launch on its stream), the gather and
// meet 2. Flags compare equal to the launch's number, so a slot a half skips keeps an older number
// and every meeting of a later launch still waits for that launch's own. Halves 5 (the reduce
// half used alone, ddp.shard_optimizer: no gather follows on this buffer) adds meet 1 after the
// reduce, so that a rank rewrites its buffer only once every peer has read it. A slot is written
// anew only after the writer has passed another meeting that every rank reaches after its wait
// on the slot (meet 0 → 1 → 0 for halves 5; 0 → 1 → 2 → 0 for 1 then 2; 1 → 2 → 1 for 2 alone),
// so no rank can miss the number it waits for.
//
// Block b of every rank handles the same elements of a segment (the same grid, the same
// grid-stride loop from the segment's start), so a block waits only for its namesakes. A meeting
// writes this rank's number e into slot [phase][b][rank] of each peer's flags (st.release at
// system scope, after __syncthreads and a system fence) and spins on its own slots until every
// peer's is e (ld.acquire at system scope), or gives up when the host sets the abort word ctl[0]
// (the rank waited on goes to ctl[1]; the block returns and the buffer holds no result): the start/end flags of vLLM's custom all-reduce and
// TensorRT-LLM's, written afresh. The grid is small (ipc.go: at most the multiprocessors ÷ ranks)
// so that the blocks of every rank can be resident on the GPU at once: spinning blocks never wait
// for a block that cannot be scheduled. Peers' memory is read with __ldcg (L2, not a stale L1).
//
// Paced by the stream (halves | 8; GODDP_IPC_WAIT=stream, ipc_pace.go): the launch holds no
// meeting at all. The same meetings, for the whole grid at once, go around it on the stream: each
// rank's k_ipc_arrive writes e into its slot [phase][0][rank] of every rank's flags, and its stream
// then waits until its own slots of every peer reach e (cuStreamWaitValue32), so the launch starts
// only when its peers' buffers are ready and no block ever waits for another process: on a GPU
// the ranks share (MPS), spinning blocks no longer take multiprocessors from a peer's backward,
// nor hold every slot while the peer they wait for cannot get its own blocks on
// (docs/perf-gpu-ddp.md, "Under MPS"). The reduce (halves 1|8) and the gather (2|8) are then
// launches of their own, with meeting 1 between them.
const ipcKernelSource = `
typedef unsigned short u16;
typedef unsigned long long u64;
#define IPC_MAXB 64
#define IPC_MAXR 16

__device__ __forceinline__ float h2f(u16 h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ u16 f2bf(float f) {
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u); // NaN stays a quiet NaN
	return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                   // nearest, ties to even
}

__device__ __forceinline__ float load(u64 base, long i, int dt) {
	if (dt == 0) return __ldcg((const float*)base + i);
	u16 v = __ldcg((const unsigned short*)base + i);
	return dt == 1 ? h2f(v) : bf2f(v);
}

__device__ __forceinline__ void store(u64 base, long i, int dt, float v) {
	if (dt == 0) ((float*)base)[i] = v;
	else ((u16*)base)[i] = dt == 1 ? f2h(v) : f2bf(v);
}

__device__ __forceinline__ void copy1(u64 dst, u64 src, long i, int dt) {
	if (dt == 0) ((unsigned*)dst)[i] = __ldcg((const unsigned*)src + i);
	else ((u16*)dst)[i] = __ldcg((const unsigned short*)src + i);
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
	asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ unsigned ld_volatile(const unsigned* p) {
	unsigned v;
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

// meet: block blockIdx.x of this rank and of every other rank have all reached phase ph of e.
// It returns 0 when they have, 1 when this block gave up because the host set the abort word
// ctl[0] (pinned host memory, polled every 256 spins; ctl 0: no abort word): the thread that saw
// it writes the rank it was waiting for, plus one, into ctl[1] (ipc_async.go, Stalled).
__device__ int meet(const u64* tab, int n, int rank, int ph, unsigned e, unsigned* ctl) {
	__shared__ int quit;
	if (threadIdx.x == 0) quit = 0;
	__syncthreads();
	if (threadIdx.x < n) {
		long slot = ((long)ph * IPC_MAXB + blockIdx.x) * IPC_MAXR;
		unsigned* peer = (unsigned*)tab[n + threadIdx.x];
		const unsigned* self = (const unsigned*)tab[n + rank];
		__threadfence_system();
		st_release(peer + slot + rank, e);
		unsigned spins = 0;
		while (ld_acquire(self + slot + threadIdx.x) != e) {
			if (++spins & 255u) continue;
			if (ctl && ld_volatile(ctl) != 0) {
				ctl[1] = (unsigned)threadIdx.x + 1;
				quit = 1;
				break;
			}
		}
	}
	__syncthreads();
	return quit;
}

extern "C" {

__global__ void k_ipc_allreduce(const u64* __restrict__ tab, int n, int rank, int dt, unsigned e, float scale, float div, unsigned* ctl, int halves) {
	long stride = (long)gridDim.x * blockDim.x, first = blockIdx.x * (long)blockDim.x + threadIdx.x;
	u64 own = tab[rank];
	if (ctl != 0 && ld_volatile(ctl) != 0) return; // aborted before it began: not even a flag is written
	int paced = halves & 8; // the stream met the peers before this launch: no meeting here
	if (halves & 1) {
		if (!paced && meet(tab, n, rank, 0, e, ctl)) return;
		long lo = (long)tab[2 * n + rank], hi = (long)tab[3 * n + rank];
		for (long i = lo + first; i < hi; i += stride) {
			float s = __fmul_rn(load(tab[tab[4 * n]], i, dt), scale);
			for (int k = 1; k < n; k++) s = __fadd_rn(s, __fmul_rn(load(tab[tab[4 * n + k]], i, dt), scale));
			if (div != 1.0f) s = __fdiv_rn(s, div);
			store(own, i, dt, s);
		}
	}
	// 2: every segment final before the gather; 4: the reduce half used alone ends here, every
	// rank done reading this rank's buffer, so the caller may rewrite it once the launch is done.
	if (!paced && (halves & 6) && meet(tab, n, rank, 1, e, ctl)) return;
	if (!(halves & 2)) return;
	for (int q = 0; q < n; q++) {
		if (q == rank) continue;
		long qlo = (long)tab[2 * n + q], qhi = (long)tab[3 * n + q];
		for (long i = qlo + first; i < qhi; i += stride) copy1(own, tab[q], i, dt);
	}
	if (!paced) meet(tab, n, rank, 2, e, ctl);
}

// k_ipc_arrive(tab, n, rank, ph, e, ctl): this rank's arrival at meeting ph of launch e when the
// stream paces the all-reduce (ipc_pace.go): e into slot [ph][0][rank] of every rank's flags, its
// own included; one block of at least n threads. Everything before it on the stream is done, its
// writes made visible by the fence. Aborted, it writes nothing: no peer may take this rank's
// buffer as ready once this rank has given up.
__global__ void k_ipc_arrive(const u64* __restrict__ tab, int n, int rank, int ph, unsigned e, unsigned* ctl) {
	if (ctl != 0 && ld_volatile(ctl) != 0) return;
	__threadfence_system();
	if (threadIdx.x < n) st_release((unsigned*)tab[n + threadIdx.x] + (long)ph * IPC_MAXB * IPC_MAXR + rank, e);
}

} // extern "C"
`
