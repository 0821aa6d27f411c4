//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"

	"github.com/goddp/goddp/model/cuda/cublaslt"
	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// lt_tune.go: a cublasLt matmul's algorithm chosen by timing, not by the heuristic's first rank
// (issue 35; the default since session 23, GODDP_LT_TUNE=0 takes the heuristic's first). The profile of session 22 (H100,
// GPT-2 small at b16) has the weight-gradient GEMMs with the BGRADB epilogue at 300–580 TFLOP/s
// (768×768×16384: 0.064 ms a layer, 300; 768×2304×16384: 428) where the plain GEMMs of the step
// reach 650–690: their outputs are a few dozen tiles for 132 SMs, and the heuristic's first
// algorithm need not split K. At a plan's first use ltTuneAlgo asks the heuristic for up to
// ltTuneCandidates algorithms, times each on the call's own operands, writing the call's own
// outputs (one warm-up, ltTuneReps timed runs between two events), and keeps the fastest —
// unless the heuristic's first is within ltTuneMargin of it, which then stays (the same choice as
// without the knob wherever timing cannot tell them apart). One line on stderr per timed plan
// says what it chose; the choice is kept on disk for the GPU model (lt_tune_cache.go), so later
// runs on the machine take it without timing, and run after run gives the same bits.
//
// Each algorithm is deterministic, but another one may add in another order: a tuned run's bits
// may differ from an untuned one's (within rounding: TestCUDA_ltTuneMatchesCPU), and two first
// runs on two machines (or with the cache file removed) may choose differently where two
// candidates time alike. Ranks of one DDP run may choose
// differently too: each rank's local gradients are its own either way, the all-reduced ones are
// the same on every rank, so the replicas stay identical.

const (
	ltTuneCandidates = 8    // heuristic results timed per plan
	ltTuneReps       = 3    // timed runs per candidate, after one warm-up
	ltTuneMargin     = 0.03 // the heuristic's first stays unless another is this much faster
)

// ltTuneAlgo returns the algorithm to keep for p (its addresses set, as the matmul will run;
// alpha, beta and the operands a, b, out those of the call), given the heuristic's first
// (first, ok as Handle.Algo returned them). The trials run on the call's own operands and write
// its own outputs (which the call then writes again), D to scratch where beta ≠ 0 reads it. Any
// candidate whose run fails is skipped; if fewer than two can run, first stays. Called outside
// d.enter.
func (d *Device) ltTuneAlgo(p *cublaslt.Plan, alpha, beta float32, a, b, out *tensor.Tensor, first cublaslt.Algo, ok bool) cublaslt.Algo {
	s := d.lt
	if !ok {
		return first
	}
	d.enter()
	cands, err := s.h.Algos(p, ltWorkspace, ltTuneCandidates)
	d.leave()
	if err != nil || len(cands) < 2 {
		return first
	}
	// A choice this GPU model kept from an earlier run (lt_tune_cache.go): the same algorithm,
	// so the same bits, run after run.
	key := *p
	key.Bias, key.Aux = 0, 0
	keyText := fmt.Sprintf("%+v", key)
	cache := ltTuneCachePath(KernelCacheDir(), d.name)
	if i, ok := ltTuneCached(cache, keyText, len(cands)); ok {
		s.Tuned++
		return cands[i]
	}
	// The trials write where the call will: the call's own matmul runs next on the same stream and
	// writes every output again (D, and the bias gradient or the auxiliary output an epilogue
	// writes), so they cost no memory of their own — a scratch D as large as the lm_head's logits
	// chunk (0.4 GB at b8) raised ddptrain's peak over the untuned run's in session 23's first
	// GPU run. Only where beta ≠ 0 (D is read: an accumulating GEMM) do they write a scratch D,
	// zeroed; its size is the call's output.
	d0 := dptr(out)
	var sd *tensor.Tensor
	if beta != 0 {
		sd = d.Alloc(out.DType(), "cublaslt.tune.d", max(out.Len(), p.LDD*(p.N-1)+p.M))
		d.Fill(sd, 0)
		d0 = dptr(sd)
	}
	ws := d.Alloc(tensor.F32, "cublaslt.workspace", ltWorkspace/4)
	ms := make([]float64, len(cands))
	d.enter()
	e0, err0 := cudadrv.NewEvent(true)
	e1, err1 := cudadrv.NewEvent(true)
	for i, c := range cands {
		ms[i] = math.Inf(1)
		if err0 != nil || err1 != nil {
			break
		}
		run := func() bool {
			return s.h.Matmul(p, c, alpha, beta, dptr(a), dptr(b), d0, dptr(ws), ltWorkspace, d.stream.Ptr()) == nil
		}
		if !run() { // this candidate cannot run these operands: skipped
			continue
		}
		good := e0.Record(d.stream) == nil
		for r := 0; r < ltTuneReps && good; r++ {
			good = run()
		}
		if good && e1.Record(d.stream) == nil && e1.Sync() == nil {
			if t, err := e0.Elapsed(e1); err == nil {
				ms[i] = float64(t) / ltTuneReps
			}
		}
	}
	if err0 == nil {
		e0.Destroy()
	}
	if err1 == nil {
		e1.Destroy()
	}
	d.leave()
	d.Free(ws)
	if sd != nil {
		d.Free(sd)
	}
	best := ltTunePick(ms, ltTuneMargin)
	fmt.Fprintf(os.Stderr, "cuda: GODDP_LT_TUNE: lt epi%d %dx%dx%d %s>%s: candidate %d of %d, %.4f ms a run against the heuristic's first %.4f\n",
		p.Epilogue, p.M, p.N, p.K, a.DType(), out.DType(), best, len(cands), ms[best], ms[0])
	if !math.IsInf(ms[best], 1) { // something was timed: keep it for the next run
		_ = storeLTTuneChoice(cache, keyText, ltTuneChoice{best, len(cands)}) // an optimisation: a failed write is no error
	}
	s.Tuned++
	return cands[best]
}
