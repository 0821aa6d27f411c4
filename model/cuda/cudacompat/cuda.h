/*
 * goddp's compatibility cuda.h: gorgonia.org/cu v0.9.6 was written against the CUDA 10–12 driver
 * API. CUDA 13 changed five signatures (the header maps the old names to new entry points with
 * extra arguments), so the package no longer compiles. This header is found first on the include
 * path (scripts/cuda-env.sh puts this folder in CGO_CFLAGS), includes the real cuda.h, and under
 * CUDA 13 replaces those five names with static inline functions of the old signatures that call
 * the new entry points with NULL parameters / edge data and a device CUmemLocation.
 * With CUDA 12 and older it changes nothing.
 */
#ifndef GODDP_CUDACOMPAT_CUDA_H
#define GODDP_CUDACOMPAT_CUDA_H

#include_next <cuda.h>

#if CUDA_VERSION >= 13000

#ifndef CU_DEVICE_CPU
#define CU_DEVICE_CPU ((CUdevice)-1)
#endif

static inline CUmemLocation goddp_compat_location(CUdevice dev) {
	CUmemLocation loc;
	if (dev == CU_DEVICE_CPU) {
		loc.type = CU_MEM_LOCATION_TYPE_HOST;
		loc.id = 0;
	} else {
		loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
		loc.id = (int)dev;
	}
	return loc;
}

#undef cuCtxCreate
static inline CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

#undef cuMemAdvise
static inline CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
	return cuMemAdvise_v2(devPtr, count, advice, goddp_compat_location(device));
}

#undef cuMemPrefetchAsync
static inline CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
	return cuMemPrefetchAsync_v2(devPtr, count, goddp_compat_location(dstDevice), 0, hStream);
}

#undef cuGraphAddDependencies
static inline CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies) {
	return cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

#undef cuGraphGetEdges
static inline CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges) {
	return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

#endif /* CUDA_VERSION >= 13000 */
#endif /* GODDP_CUDACOMPAT_CUDA_H */
