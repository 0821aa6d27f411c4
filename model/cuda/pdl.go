package cuda

// pdl.go: programmatic dependent launch (compute capability 9.0 or later with a CUDA 12 build and
// driver: the default there since session 26's whole suite, hopperDefault; GODDP_PDL=0 off, =1
// required). A kernel launched with it (cudadrv.LaunchPDL) may have its blocks scheduled while the
// kernel ahead of it on the stream is still finishing, so the ~700 launches of a GPT-2 step stop
// paying the grid-to-grid gap (the last block's exit, the memory flush, the next grid's block
// dispatch) one after another: the next grid's blocks are already resident and waiting. For that
// every kernel of the modules the device launches this way must begin by waiting for the grid
// before it (griddepcontrol.wait: that grid has completed and its writes are visible), and lets the
// grid after it be scheduled once all of its own blocks are running
// (griddepcontrol.launch_dependents) — pdlSource puts both at the top of every __global__ body.
// Built without the cuda tag so its test runs everywhere.

import (
	"fmt"
	"regexp"
	"strings"
)

// pdlPrelude defines the entry pdlSource inserts: the two instructions on sm_90 and later, nothing
// on older targets (where the device never launches this way).
const pdlPrelude = `
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GODDP_PDL_ENTRY() do { asm volatile("griddepcontrol.wait;\n" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); } while (0)
#else
#define GODDP_PDL_ENTRY() do { } while (0)
#endif
`

// pdlKernelRE matches a kernel's head through the brace that opens its body: the parameter list
// holds no braces, and __launch_bounds__ only parentheses.
var pdlKernelRE = regexp.MustCompile(`__global__\s+void\s[^{;]*\{`)

// pdlSource returns src with pdlPrelude first and GODDP_PDL_ENTRY(); opening every kernel's body,
// and how many kernels it changed. A __global__ that is not a definition with a body (a
// declaration) is an error: the device must not launch a kernel this way that does not wait.
func pdlSource(src string) (string, int, error) {
	var b strings.Builder
	b.Grow(len(src) + len(pdlPrelude) + 4096)
	b.WriteString(pdlPrelude)
	n, at := 0, 0
	for _, m := range pdlKernelRE.FindAllStringIndex(src, -1) {
		b.WriteString(src[at:m[1]])
		b.WriteString(" GODDP_PDL_ENTRY();")
		at = m[1]
		n++
	}
	b.WriteString(src[at:])
	if all := strings.Count(src, "__global__"); all != n {
		return "", 0, fmt.Errorf("cuda: GODDP_PDL=1: %d of the source's %d __global__ functions have a body to open with the wait", n, all)
	}
	return b.String(), n, nil
}
