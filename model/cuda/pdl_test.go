package cuda

import (
	"strings"
	"testing"
)

func TestPDLSource(t *testing.T) {
	src := `#define X 1
__device__ __forceinline__ float f(float x) { return x; }
__global__ void k_a(float* p, long n) {
	for (long i = 0; i < n; i++) p[i] = f(p[i]);
}
// a comment
__global__ void __launch_bounds__(128, 3) k_b(const half_t* __restrict__ q,
		int T) { if (T > 0) { q += 1; } }
template <int N>
__global__ void k_c() {}
`
	out, n, err := pdlSource(src)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("changed %d kernels, want 3", n)
	}
	if !strings.HasPrefix(out, pdlPrelude) {
		t.Fatalf("the prelude is not first:\n%s", out)
	}
	body := strings.TrimPrefix(out, pdlPrelude)
	for _, want := range []string{
		"__global__ void k_a(float* p, long n) { GODDP_PDL_ENTRY();\n\tfor",
		"int T) { GODDP_PDL_ENTRY(); if (T > 0) { q += 1; } }",
		"__global__ void k_c() { GODDP_PDL_ENTRY();}",
		"__device__ __forceinline__ float f(float x) { return x; }", // not a kernel: unchanged
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in:\n%s", want, body)
		}
	}
	if got := strings.Count(body, "GODDP_PDL_ENTRY"); got != 3 {
		t.Errorf("%d entries, want 3", got)
	}
	// Without the insertions, the source comes back as it was.
	if strings.ReplaceAll(body, " GODDP_PDL_ENTRY();", "") != src {
		t.Errorf("the source changed beyond the entries:\n%s", body)
	}
}

func TestPDLSource_declarationRefused(t *testing.T) {
	_, _, err := pdlSource("__global__ void k_a(float* p);\n__global__ void k_b(float* p) { }\n")
	if err == nil || !strings.Contains(err.Error(), "GODDP_PDL=1") || !strings.Contains(err.Error(), "1 of the source's 2") {
		t.Fatalf("err = %v, want the declaration refused", err)
	}
}
