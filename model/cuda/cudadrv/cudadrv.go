//go:build cuda

// Package cudadrv is goddp's small cgo layer under the CUDA device (model/cuda): streams,
// events, memory and copies, module loading and kernel launches through the driver API, and the
// two cuBLAS entry points the device needs (cublasGemmEx, cublasGemmStridedBatchedEx). It is a
// package of its own so that all of the device's cgo sits in this one file (package cuda above it
// is plain Go). Device addresses travel as uint64; nothing here keeps state.
//
// Every call must run on an OS thread whose current context is the device's (package cuda locks
// the goroutine and sets it).
package cudadrv

/*
#cgo CFLAGS: -I${SRCDIR}/../cudacompat
#cgo LDFLAGS: -lcuda -lcublas
#include <cuda.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <string.h>

static CUresult goddp_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s, uint64_t *vals, int n) {
	void *args[24];
	for (int i = 0; i < n && i < 24; i++) args[i] = &vals[i];
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, args, NULL);
}

// goddp_launch_pdl: goddp_launch with programmatic dependent launch allowed (CUDA 12.0 and later:
// cuLaunchKernelEx, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): f may start before the
// kernel ahead of it in s has finished, once that kernel's blocks have all triggered
// (griddepcontrol.launch_dependents) or exited; f must wait (griddepcontrol.wait) before it reads
// what that kernel wrote. Older headers: CUDA_ERROR_NOT_SUPPORTED.
static CUresult goddp_launch_pdl(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s, uint64_t *vals, int n) {
#if CUDA_VERSION >= 12000
	void *args[24];
	for (int i = 0; i < n && i < 24; i++) args[i] = &vals[i];
	CUlaunchAttribute at[1];
	memset(at, 0, sizeof at);
	at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	at[0].value.programmaticStreamSerializationAllowed = 1;
	CUlaunchConfig c;
	memset(&c, 0, sizeof c);
	c.gridDimX = gx; c.gridDimY = gy; c.gridDimZ = gz;
	c.blockDimX = bx; c.blockDimY = by; c.blockDimZ = bz;
	c.sharedMemBytes = shmem;
	c.hStream = s;
	c.attrs = at;
	c.numAttrs = 1;
	return cuLaunchKernelEx(&c, f, args, NULL);
#else
	return CUDA_ERROR_NOT_SUPPORTED;
#endif
}

// goddp_pdl_supported: 1 where goddp_launch_pdl can run: built against CUDA 12 headers and a
// driver of 12.0 or later.
static int goddp_pdl_supported(void) {
#if CUDA_VERSION >= 12000
	int v = 0;
	if (cuDriverGetVersion(&v) != CUDA_SUCCESS) return 0;
	return v >= 12000;
#else
	return 0;
#endif
}

static const char *goddp_errname(CUresult r) {
	const char *s = NULL;
	cuGetErrorName(r, &s);
	return s ? s : "CUDA_ERROR_UNKNOWN";
}

// dt is tensor.DType: 0 f32, 1 f16, 3 bf16.
static cudaDataType goddp_dt(int dt) { return dt == 1 ? CUDA_R_16F : dt == 3 ? CUDA_R_16BF : CUDA_R_32F; }

// Column-major GEMM: C (m×n) = alpha·op(A)·op(B) + beta·C with FP32 compute. The handle's math
// mode is CUBLAS_DEFAULT_MATH, so FP32 operands never use TF32; f16 operands use the tensor cores.
static cublasStatus_t goddp_gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha,
		unsigned long long A, int adt, int lda, unsigned long long B, int bdt, int ldb, float beta,
		unsigned long long C, int cdt, int ldc) {
	return cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
		(const void *)A, goddp_dt(adt), lda, (const void *)B, goddp_dt(bdt), ldb, &beta, (void *)C, goddp_dt(cdt), ldc,
		CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t goddp_gemm_batched(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha,
		unsigned long long A, int adt, int lda, long long sa, unsigned long long B, int bdt, int ldb, long long sb,
		float beta, unsigned long long C, int cdt, int ldc, long long sc, int batch) {
	return cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
		(const void *)A, goddp_dt(adt), lda, sa, (const void *)B, goddp_dt(bdt), ldb, sb, &beta,
		(void *)C, goddp_dt(cdt), ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t goddp_blas_init(cublasHandle_t *h, CUstream s) {
	cublasStatus_t st = cublasCreate(h);
	if (st != CUBLAS_STATUS_SUCCESS) return st;
	st = cublasSetStream(*h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return st;
	return cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH);
}

static CUresult goddp_htod(unsigned long long dst, const void *src, size_t n, CUstream s) {
	return cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, s);
}
static CUresult goddp_dtoh(void *dst, unsigned long long src, size_t n, CUstream s) {
	return cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, s);
}

// CUDA IPC and peer access (issue 34): handles are copied in and out as 64 bytes.
static CUresult goddp_ipc_get_mem(void *out, unsigned long long p) {
	CUipcMemHandle h;
	CUresult r = cuIpcGetMemHandle(&h, (CUdeviceptr)p);
	memcpy(out, &h, sizeof h);
	return r;
}
static CUresult goddp_ipc_open_mem(unsigned long long *p, const void *in) {
	CUipcMemHandle h;
	memcpy(&h, in, sizeof h);
	CUdeviceptr d = 0;
	CUresult r = cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	*p = (unsigned long long)d;
	return r;
}
static CUresult goddp_ipc_get_event(void *out, CUevent e) {
	CUipcEventHandle h;
	CUresult r = cuIpcGetEventHandle(&h, e);
	memcpy(out, &h, sizeof h);
	return r;
}
static CUresult goddp_ipc_open_event(CUevent *e, const void *in) {
	CUipcEventHandle h;
	memcpy(&h, in, sizeof h);
	return cuIpcOpenEventHandle(e, h);
}
static CUresult goddp_can_access_peer(int *can, int dev, int peer) {
	CUdevice a, b;
	CUresult r = cuDeviceGet(&a, dev);
	if (r != CUDA_SUCCESS) return r;
	if ((r = cuDeviceGet(&b, peer)) != CUDA_SUCCESS) return r;
	return cuDeviceCanAccessPeer(can, a, b);
}
// The peer's primary context is retained for the call only: the process holds it open already
// (its own Device on that GPU) or peer access would have nothing to reach.
static CUresult goddp_enable_peer(int peer) {
	CUdevice d;
	CUcontext c;
	CUresult r = cuDeviceGet(&d, peer);
	if (r != CUDA_SUCCESS) return r;
	if ((r = cuDevicePrimaryCtxRetain(&c, d)) != CUDA_SUCCESS) return r;
	r = cuCtxEnablePeerAccess(c, 0);
	if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) r = CUDA_SUCCESS;
	cuDevicePrimaryCtxRelease(d);
	return r;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Error is a failed driver call.
type Error struct {
	Op   string
	Code int
	Name string
}

func (e *Error) Error() string { return fmt.Sprintf("cudadrv: %s: %s (%d)", e.Op, e.Name, e.Code) }

func check(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &Error{Op: op, Code: int(r), Name: C.GoString(C.goddp_errname(r))}
}

// Init calls cuInit.
func Init() error { return check("cuInit", C.cuInit(0)) }

// ---- streams and events ----

// Stream is a CUDA stream (created non-blocking with respect to the legacy default stream).
type Stream struct{ s C.CUstream }

func NewStream() (Stream, error) {
	var s Stream
	return s, check("cuStreamCreate", C.cuStreamCreate(&s.s, C.CU_STREAM_NON_BLOCKING))
}
func (s Stream) Sync() error    { return check("cuStreamSynchronize", C.cuStreamSynchronize(s.s)) }
func (s Stream) Destroy() error { return check("cuStreamDestroy", C.cuStreamDestroy(s.s)) }

// Ptr is the stream's CUstream, for libraries that take one (cuDNN's cudnnSetStream).
func (s Stream) Ptr() unsafe.Pointer { return unsafe.Pointer(s.s) }

// Wait makes s wait for e's last record.
func (s Stream) Wait(e Event) error {
	return check("cuStreamWaitEvent", C.cuStreamWaitEvent(s.s, e.e, 0))
}

// Event is a CUDA event.
type Event struct{ e C.CUevent }

// NewEvent makes an event; timing says whether it records times (for Elapsed).
func NewEvent(timing bool) (Event, error) {
	var e Event
	flags := C.uint(C.CU_EVENT_DISABLE_TIMING)
	if timing {
		flags = C.CU_EVENT_DEFAULT
	}
	return e, check("cuEventCreate", C.cuEventCreate(&e.e, flags))
}
func (e Event) Record(s Stream) error { return check("cuEventRecord", C.cuEventRecord(e.e, s.s)) }
func (e Event) Sync() error           { return check("cuEventSynchronize", C.cuEventSynchronize(e.e)) }
func (e Event) Destroy() error        { return check("cuEventDestroy", C.cuEventDestroy(e.e)) }

// Query reports whether the work before e's last Record is done, without waiting (cuEventQuery:
// CUDA_ERROR_NOT_READY means not yet; an event never recorded is done).
func (e Event) Query() (bool, error) {
	r := C.cuEventQuery(e.e)
	if r == C.CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return r == C.CUDA_SUCCESS, check("cuEventQuery", r)
}

// Elapsed is the time from e to end in milliseconds.
func (e Event) Elapsed(end Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.cuEventElapsedTime(&ms, e.e, end.e))
	return float32(ms), err
}

// ---- memory ----

func MemAlloc(bytes int64) (uint64, error) {
	var p C.CUdeviceptr
	err := check("cuMemAlloc", C.cuMemAlloc(&p, C.size_t(bytes)))
	return uint64(p), err
}
func MemFree(p uint64) error { return check("cuMemFree", C.cuMemFree(C.CUdeviceptr(p))) }

// MemInfo is cuMemGetInfo: free and total bytes on the card.
func MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = check("cuMemGetInfo", C.cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

func MemsetD8Async(p uint64, v byte, n int64, s Stream) error {
	return check("cuMemsetD8Async", C.cuMemsetD8Async(C.CUdeviceptr(p), C.uchar(v), C.size_t(n), s.s))
}

// HtoD copies n bytes from host memory at src (pageable or pinned) on s. From pageable memory the
// driver stages the bytes before returning, so the source may be reused at once.
func HtoD(dst uint64, src unsafe.Pointer, n int64, s Stream) error {
	return check("cuMemcpyHtoDAsync", C.goddp_htod(C.ulonglong(dst), src, C.size_t(n), s.s))
}

// DtoH copies n bytes to host memory on s. Into pageable memory it returns when the copy is done;
// into pinned memory it returns at once.
func DtoH(dst unsafe.Pointer, src uint64, n int64, s Stream) error {
	return check("cuMemcpyDtoHAsync", C.goddp_dtoh(dst, C.ulonglong(src), C.size_t(n), s.s))
}

func DtoD(dst, src uint64, n int64, s Stream) error {
	return check("cuMemcpyDtoDAsync", C.cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s.s))
}

// MemsetD32Async sets n 32-bit words at p to v on s.
func MemsetD32Async(p uint64, v uint32, n int64, s Stream) error {
	return check("cuMemsetD32Async", C.cuMemsetD32Async(C.CUdeviceptr(p), C.uint(v), C.size_t(n), s.s))
}

// StreamWaitValue32 enqueues on s a wait until the 32-bit word at addr is at or past v in
// wrapping order ((int32)(*addr − v) ≥ 0, CU_STREAM_WAIT_VALUE_GEQ): work after it on s starts
// only then. The stream's front end waits; no kernel spins and no multiprocessor is held.
func StreamWaitValue32(s Stream, addr uint64, v uint32) error {
	return check("cuStreamWaitValue32", C.cuStreamWaitValue32(s.s, C.CUdeviceptr(addr), C.cuuint32_t(v), C.CU_STREAM_WAIT_VALUE_GEQ))
}

// HostAlloc returns page-locked host memory (cuMemHostAlloc, portable).
func HostAlloc(bytes int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := check("cuMemHostAlloc", C.cuMemHostAlloc(&p, C.size_t(bytes), C.CU_MEMHOSTALLOC_PORTABLE))
	return p, err
}
func HostFree(p unsafe.Pointer) error { return check("cuMemFreeHost", C.cuMemFreeHost(p)) }

// ---- CUDA IPC and peer access (issue 34: the all-reduce over IPC buffers, model/cuda/ipc.go) ----

// IPCHandleSize is the size of a memory or event handle (CU_IPC_HANDLE_SIZE).
const IPCHandleSize = 64

// IpcMemHandle names a cuMemAlloc allocation to another process (CUipcMemHandle's bytes).
type IpcMemHandle [IPCHandleSize]byte

// IpcEventHandle names an interprocess event to another process (CUipcEventHandle's bytes).
type IpcEventHandle [IPCHandleSize]byte

// IpcGetMemHandle is cuIpcGetMemHandle of the allocation that starts at base (a cuMemAlloc result).
func IpcGetMemHandle(base uint64) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := check("cuIpcGetMemHandle", C.goddp_ipc_get_mem(unsafe.Pointer(&h[0]), C.ulonglong(base)))
	return h, err
}

// IpcOpenMemHandle maps another process's allocation into this context (cuIpcOpenMemHandle, peer
// access enabled lazily where the devices differ) and returns its base address here. A process
// cannot open its own handles.
func IpcOpenMemHandle(h IpcMemHandle) (uint64, error) {
	var p C.ulonglong
	err := check("cuIpcOpenMemHandle", C.goddp_ipc_open_mem(&p, unsafe.Pointer(&h[0])))
	return uint64(p), err
}

// IpcCloseMemHandle unmaps what IpcOpenMemHandle mapped.
func IpcCloseMemHandle(p uint64) error {
	return check("cuIpcCloseMemHandle", C.cuIpcCloseMemHandle(C.CUdeviceptr(p)))
}

// NewIPCEvent makes an event other processes can open (CU_EVENT_INTERPROCESS, no timing).
func NewIPCEvent() (Event, error) {
	var e Event
	return e, check("cuEventCreate", C.cuEventCreate(&e.e, C.uint(C.CU_EVENT_DISABLE_TIMING|C.CU_EVENT_INTERPROCESS)))
}

// IpcGetEventHandle is cuIpcGetEventHandle of an event made by NewIPCEvent.
func IpcGetEventHandle(e Event) (IpcEventHandle, error) {
	var h IpcEventHandle
	err := check("cuIpcGetEventHandle", C.goddp_ipc_get_event(unsafe.Pointer(&h[0]), e.e))
	return h, err
}

// IpcOpenEventHandle opens another process's interprocess event.
func IpcOpenEventHandle(h IpcEventHandle) (Event, error) {
	var e Event
	return e, check("cuIpcOpenEventHandle", C.goddp_ipc_open_event(&e.e, unsafe.Pointer(&h[0])))
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer: whether GPU dev can address GPU peer's memory.
func DeviceCanAccessPeer(dev, peer int) (bool, error) {
	var can C.int
	err := check("cuDeviceCanAccessPeer", C.goddp_can_access_peer(&can, C.int(dev), C.int(peer)))
	return can != 0, err
}

// CtxEnablePeerAccess is cuCtxEnablePeerAccess from the current context to GPU peer's primary
// context (already enabled is not an error).
func CtxEnablePeerAccess(peer int) error {
	return check("cuCtxEnablePeerAccess", C.goddp_enable_peer(C.int(peer)))
}

// ---- modules and launches ----

type Module struct{ m C.CUmodule }
type Function struct{ f C.CUfunction }

// LoadPTX loads a PTX (or cubin) image.
func LoadPTX(image string) (Module, error) {
	var m Module
	b := append([]byte(image), 0)
	err := check("cuModuleLoadData", C.cuModuleLoadData(&m.m, unsafe.Pointer(&b[0])))
	return m, err
}

func (m Module) Function(name string) (Function, error) {
	var f Function
	b := append([]byte(name), 0)
	err := check("cuModuleGetFunction "+name, C.cuModuleGetFunction(&f.f, m.m, (*C.char)(unsafe.Pointer(&b[0]))))
	return f, err
}
func (m Module) Unload() error { return check("cuModuleUnload", C.cuModuleUnload(m.m)) }

// Resources is what a loaded kernel holds (cuFuncGetAttribute) and how many of its blocks fit one
// SM at a block size (cuOccupancyMaxActiveBlocksPerMultiprocessor): the register and spill half of
// a profiler's launch statistics, without the performance counters a profiler needs.
type Resources struct {
	Registers    int // per thread
	LocalBytes   int // local memory per thread: spills (and stack arrays) of the register allocation
	StaticShared int // bytes of __shared__ per block
	MaxThreads   int // the most threads a block of it may have
	BlocksPerSM  int // resident blocks per SM at the asked block size and dynamic shared memory
}

// Resources reads f's attributes and its occupancy at blockSize threads and dynShared bytes of
// dynamic shared memory.
func (f Function) Resources(blockSize, dynShared int) (Resources, error) {
	var r Resources
	for _, a := range []struct {
		attr C.CUfunction_attribute
		dst  *int
		name string
	}{{C.CU_FUNC_ATTRIBUTE_NUM_REGS, &r.Registers, "NUM_REGS"}, {C.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &r.LocalBytes, "LOCAL_SIZE_BYTES"},
		{C.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &r.StaticShared, "SHARED_SIZE_BYTES"},
		{C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &r.MaxThreads, "MAX_THREADS_PER_BLOCK"}} {
		var v C.int
		if err := check("cuFuncGetAttribute "+a.name, C.cuFuncGetAttribute(&v, a.attr, f.f)); err != nil {
			return r, err
		}
		*a.dst = int(v)
	}
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		C.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f.f, C.int(blockSize), C.size_t(dynShared)))
	r.BlocksPerSM = int(n)
	return r, err
}

// SetCarveout is cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT): the
// share of the SM's unified L1/shared memory, in percent, that f prefers as shared memory (-1 no
// preference, the default; 100 the most). A hint the driver may override.
func (f Function) SetCarveout(percent int) error {
	return check("cuFuncSetAttribute PREFERRED_SHARED_MEMORY_CARVEOUT",
		C.cuFuncSetAttribute(f.f, C.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, C.int(percent)))
}

// SetMaxDynamicShared is cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): the
// most dynamic shared memory a launch of f may ask for, which must be set before a launch asks for
// more than 48 KiB (up to the device's opt-in limit, 227 KiB on Hopper).
func (f Function) SetMaxDynamicShared(bytes int) error {
	return check("cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES",
		C.cuFuncSetAttribute(f.f, C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, C.int(bytes)))
}

// MaxArgs is the most kernel arguments Launch takes.
const MaxArgs = 24

// Launch enqueues f on s. Each argument is one 8-byte slot of args; a 4-byte parameter reads the
// low half of its slot (little-endian).
func Launch(f Function, grid, block [3]int, shmem int, s Stream, args *[MaxArgs]uint64, n int) error {
	return check("cuLaunchKernel", C.goddp_launch(f.f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), s.s, (*C.uint64_t)(unsafe.Pointer(&args[0])), C.int(n)))
}

// LaunchPDL is Launch with programmatic dependent launch allowed (cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; compute capability 9.0 and a CUDA 12
// driver): f's blocks may be scheduled while the kernel ahead of it on s finishes, so f must
// begin with griddepcontrol.wait (model/cuda's pdlSource puts it there). GODDP_PDL=1; not yet
// run on a GPU.
func LaunchPDL(f Function, grid, block [3]int, shmem int, s Stream, args *[MaxArgs]uint64, n int) error {
	return check("cuLaunchKernelEx", C.goddp_launch_pdl(f.f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), s.s, (*C.uint64_t)(unsafe.Pointer(&args[0])), C.int(n)))
}

// PDLSupported reports whether LaunchPDL can run here: this package built against CUDA 12
// headers (cuLaunchKernelEx) and a CUDA 12 driver.
func PDLSupported() bool { return C.goddp_pdl_supported() != 0 }

// ---- cuBLAS ----

// Blas is a cuBLAS handle bound to one stream.
type Blas struct{ h C.cublasHandle_t }

func NewBlas(s Stream) (*Blas, error) {
	b := &Blas{}
	if st := C.goddp_blas_init(&b.h, s.s); st != C.CUBLAS_STATUS_SUCCESS {
		return nil, fmt.Errorf("cudadrv: cuBLAS init: status %d", int(st))
	}
	return b, nil
}

func (b *Blas) Destroy() { C.cublasDestroy(b.h) }

func cb(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// Gemm is cublasGemmEx in column-major terms; dtypes are 0 (f32), 1 (f16) or 3 (bf16).
func (b *Blas) Gemm(ta, tb bool, m, n, k int, alpha float32, A uint64, adt, lda int, B uint64, bdt, ldb int,
	beta float32, C_ uint64, cdt, ldc int) error {
	st := C.goddp_gemm(b.h, cb(ta), cb(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.ulonglong(A), C.int(adt), C.int(lda), C.ulonglong(B), C.int(bdt), C.int(ldb), C.float(beta),
		C.ulonglong(C_), C.int(cdt), C.int(ldc))
	if st != C.CUBLAS_STATUS_SUCCESS {
		return fmt.Errorf("cudadrv: cublasGemmEx m=%d n=%d k=%d: status %d", m, n, k, int(st))
	}
	return nil
}

// GemmStridedBatched is cublasGemmStridedBatchedEx in column-major terms.
func (b *Blas) GemmStridedBatched(ta, tb bool, m, n, k int, alpha float32, A uint64, adt, lda int, sa int64,
	B uint64, bdt, ldb int, sb int64, beta float32, C_ uint64, cdt, ldc int, sc int64, batch int) error {
	st := C.goddp_gemm_batched(b.h, cb(ta), cb(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.ulonglong(A), C.int(adt), C.int(lda), C.longlong(sa), C.ulonglong(B), C.int(bdt), C.int(ldb), C.longlong(sb),
		C.float(beta), C.ulonglong(C_), C.int(cdt), C.int(ldc), C.longlong(sc), C.int(batch))
	if st != C.CUBLAS_STATUS_SUCCESS {
		return fmt.Errorf("cudadrv: cublasGemmStridedBatchedEx m=%d n=%d k=%d batch=%d: status %d", m, n, k, batch, int(st))
	}
	return nil
}
