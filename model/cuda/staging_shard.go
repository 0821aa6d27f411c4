//go:build cuda

package cuda

// tensor.ShardStaging for the CUDA device's staging plans (ddp.shard_optimizer on the staged
// path): the gradients' owned segment returns alone; the f16 weights go out and back through the
// bucket's pinned buffer. Same streams as staging.go: ReturnRange on the return stream (Finish
// orders it), the weights' copies on the compute stream.

import (
	"fmt"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

var _ tensor.ShardStaging = (*cudaStaging)(nil)

// checkSeg panics on a segment outside bucket i (an engine bug, not input).
func (s *cudaStaging) checkSeg(i, lo, hi int) {
	if lo < 0 || hi < lo || hi > s.count(i) {
		panic(fmt.Sprintf("cuda: staging segment [%d,%d) of bucket %d (%d elements)", lo, hi, i, s.count(i)))
	}
}

// ReturnRange copies back and widens elements [lo, hi) of bucket i only, on the return stream.
func (s *cudaStaging) ReturnRange(i, lo, hi int) {
	s.checkSeg(i, lo, hi)
	n := hi - lo
	if n == 0 {
		return
	}
	s.d.enter()
	defer s.d.leave()
	half := s.halfPtr(i) + uint64(lo)*2
	must(cudadrv.HtoD(half, unsafe.Add(s.pinned.p, (s.off[i]+lo)*2), int64(n)*2, s.ret))
	s.launch1(s.fWiden, s.ret, n, s.gradPtr(i)+uint64(lo)*4, half, uint64(n))
}

// weightPtr is element lo of range i of w, an f16 tensor laid out as the gradient slab.
func (s *cudaStaging) weightPtr(w *tensor.Tensor, i, lo int) uint64 {
	if w.DType() != tensor.F16 || w.Len() != s.grad.Len() {
		panic(fmt.Sprintf("cuda: staging weights %s: want f16 of the gradient slab's %d elements", w, s.grad.Len()))
	}
	return dptr(w) + uint64(s.ranges[i][0]+lo)*2
}

// StageWeights copies [lo, hi) of range i of w into bucket i's pinned buffer on the compute
// stream (after the optimizer step that wrote them) and waits for it.
func (s *cudaStaging) StageWeights(i int, w *tensor.Tensor, lo, hi int) []uint16 {
	s.checkSeg(i, lo, hi)
	d := s.d
	d.enter()
	defer d.leave()
	if hi > lo {
		must(cudadrv.DtoH(unsafe.Add(s.pinned.p, (s.off[i]+lo)*2), s.weightPtr(w, i, lo), int64(hi-lo)*2, d.stream))
	}
	must(d.stream.Sync())
	return s.pinned.U16()[s.off[i] : s.off[i]+s.count(i)]
}

// ReturnWeights enqueues the copy of bucket i's pinned buffer into range i of w on the compute
// stream: the next forward reads w after it, and the next Stage's copy into the buffer waits
// for a cast recorded after it.
func (s *cudaStaging) ReturnWeights(i int, w *tensor.Tensor) {
	d := s.d
	d.enter()
	defer d.leave()
	must(cudadrv.HtoD(s.weightPtr(w, i, 0), unsafe.Add(s.pinned.p, s.off[i]*2), int64(s.count(i))*2, d.stream))
}
