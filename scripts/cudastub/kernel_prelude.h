// kernel_prelude.h — what NVRTC gives the device's CUDA C sources without headers (qualifiers,
// built-in variables, intrinsics, vector types), declared for clang's CUDA front end so that
// scripts/cuda-kernels-check.sh can syntax- and type-check those sources on a machine without
// CUDA. Declarations only: nothing here is compiled into anything that runs. Add what a new kernel
// uses (the check then names it as an undeclared identifier).
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>
__device__ void __syncthreads();
__device__ void __syncwarp(unsigned m = 0xffffffff);
__device__ void __trap();
__device__ unsigned __match_any_sync(unsigned, int);
__device__ int __shfl_up_sync(unsigned, int, unsigned, int w = 32);
__device__ int __popc(unsigned);
__device__ int __ffs(int);
__device__ void __threadfence();
__device__ void __threadfence_system();
__device__ float __int_as_float(int);
__device__ int __float_as_int(float);
__device__ float __uint_as_float(unsigned);
__device__ unsigned __float_as_uint(float);
__device__ float __fmul_rn(float, float);
__device__ float __fadd_rn(float, float);
__device__ float __fdiv_rn(float, float);
__device__ float __expf(float);
__device__ float expf(float);
__device__ float logf(float);
__device__ float sqrtf(float);
__device__ float rsqrtf(float);
__device__ float tanhf(float);
__device__ float fmaxf(float, float);
__device__ float fmaf(float, float, float);
__device__ float fminf(float, float);
__device__ float fabsf(float);
__device__ float exp2f(float);
__device__ float log2f(float);
__device__ int min(int, int);
__device__ int max(int, int);
__device__ long min(long, long);
__device__ long max(long, long);
__device__ float __shfl_xor_sync(unsigned, float, int, int w = 32);
__device__ double __shfl_xor_sync(unsigned, double, int, int w = 32);
__device__ int __shfl_xor_sync(unsigned, int, int, int w = 32);
__device__ unsigned __shfl_sync(unsigned, unsigned, int, int w = 32);
__device__ float __shfl_sync(unsigned, float, int, int w = 32);
__device__ float atomicAdd(float*, float);
__device__ unsigned atomicAdd(unsigned*, unsigned);
__device__ int atomicAdd(int*, int);
__device__ float __ldcg(const float*);
__device__ unsigned short __ldcg(const unsigned short*);
__device__ unsigned __ldcg(const unsigned*);
__device__ int isnan(float);
__device__ int isinf(float);
__device__ int isfinite(float);
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
__device__ uint4 __ldcs(const uint4*);
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
__device__ int4 make_int4(int, int, int, int);
__device__ double fmax(double, double);
#define __align__(n) __attribute__((aligned(n)))
__device__ float4 make_float4(float, float, float, float);
__device__ float2 make_float2(float, float);
__device__ uint2 make_uint2(unsigned, unsigned);
typedef unsigned long size_t;
__device__ double log(double); __device__ double cos(double); __device__ double sin(double); __device__ double sqrt(double); __device__ double exp(double);
__device__ unsigned atomicCAS(unsigned*, unsigned, unsigned);
__device__ int atomicCAS(int*, int, int);
