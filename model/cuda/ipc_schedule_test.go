package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The paced schedule (ipcPacedOps) run by several ranks under random interleavings against a
// model of what the GPU holds: each rank's buffer and flags, a stream per rank that runs its steps
// in order, a wait that blocks until every peer's slot is at or past its number (GEQ in wrapping
// order, as cuStreamWaitValue32), kernels that read and write at once. Each rank makes the same
// calls (the engine launches buckets in index order everywhere): whole all-reduces, reduce halves
// alone (ipcReduceEnd, the sharded path) and reduce halves whose segment the host rewrites before
// the gather half (the path across hosts), each after the compute stream has written the rank's
// next values. Every reduce must read every rank's values of its own launch, never an older or a
// newer one; every gather must copy each segment's final value of that launch; no interleaving may
// leave a rank waiting for good.
func TestIPCPacedSchedule_randomInterleavings(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for seed := range uint64(200) {
			simIPCPaced(t, n, seed, ipcPacedOps)
		}
	}
}

// The simulation fails a schedule without its meetings: it finds the hazard it guards against.
func TestIPCPacedSchedule_findsMissingMeetings(t *testing.T) {
	for _, drop := range []int{0, 1, 2} {
		broken := func(halves int) []ipcOp {
			var ops []ipcOp
			for _, op := range ipcPacedOps(halves) {
				if (op.kind == ipcArrive || op.kind == ipcWait) && op.phase == drop {
					continue
				}
				ops = append(ops, op)
			}
			return ops
		}
		caught := false
		for seed := range uint64(200) {
			ft := &fakeT{}
			simIPCPaced(ft, 3, seed, broken)
			if ft.failed {
				caught = true
				break
			}
		}
		if !caught {
			t.Errorf("without meeting %d no interleaving of 200 went wrong: the simulation does not test it", drop)
		}
	}
}

type fakeT struct{ failed bool }

func (f *fakeT) Helper()                   {}
func (f *fakeT) Fatalf(string, ...any)     { f.failed = true; panic(f) }
func (f *fakeT) Errorf(s string, a ...any) { f.Fatalf(s, a...) }

type simT interface {
	Helper()
	Fatalf(string, ...any)
}

// simStep is one thing on a rank's stream: the compute stream writing the rank's values for a
// launch (write), the host rewriting the rank's own segment between the halves (mark), or a step
// of the launch (op).
type simStep struct {
	launch int
	e      uint32
	write  bool
	mark   bool
	op     ipcOp
}

func simIPCPaced(t simT, n int, seed uint64, ops func(int) []ipcOp) {
	t.Helper()
	if ft, ok := t.(*fakeT); ok {
		defer func() {
			if r := recover(); r != nil && r != ft {
				panic(r)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	const count, launches = 13, 8
	seg := func(r int) (int, int) { return count * r / n, count * (r + 1) / n }
	owner := make([]int, count)
	for r := range n {
		lo, hi := seg(r)
		for i := lo; i < hi; i++ {
			owner[i] = r
		}
	}
	val := func(l, r, i int) float32 { return float32(1000*l + 10*r + i%7) } // rank r's value for launch l
	sum := func(l, i int) (s float32) {
		for r := range n {
			s += val(l, r, i)
		}
		return s
	}
	mark := func(l, q, i int) float32 { return float32(-1000*l - 10*q - i%5) } // the host's rewrite of q's segment

	// Every rank's calls, the same on each: 0 a whole all-reduce, 1 a reduce half the host then
	// rewrites followed by the gather half (two launch numbers), 2 a reduce half used alone.
	kinds := make([]int, launches)
	for l := range kinds {
		kinds[l] = rng.IntN(3)
	}
	streams := make([][]simStep, n)
	for r := range n {
		e := uint32(0)
		for l, k := range kinds {
			streams[r] = append(streams[r], simStep{launch: l, write: true})
			add := func(halves int) {
				e++
				for _, op := range ops(halves) {
					streams[r] = append(streams[r], simStep{launch: l, e: e, op: op})
				}
			}
			switch k {
			case 0:
				add(ipcBoth)
			case 1:
				add(ipcReduce)
				streams[r] = append(streams[r], simStep{launch: l, mark: true})
				add(ipcGather)
			case 2:
				add(ipcReduce | ipcReduceEnd)
			}
		}
	}
	bufs := make([][]float32, n)
	flags := make([][3][]uint32, n)
	for r := range n {
		bufs[r] = make([]float32, count)
		for ph := range 3 {
			flags[r][ph] = make([]uint32, n)
		}
	}
	// final is what segment owner q holds at the end of launch l's reduce half (and after the
	// host's rewrite): what every gather of launch l must copy.
	final := func(l, i int) float32 {
		if kinds[l] == 1 {
			return mark(l, owner[i], i)
		}
		return sum(l, i)
	}
	runnable := func(r int) bool {
		if len(streams[r]) == 0 {
			return false
		}
		s := streams[r][0]
		if s.write || s.mark || s.op.kind != ipcWait {
			return true
		}
		for q := range n {
			if q != r && int32(flags[r][s.op.phase][q]-s.e) < 0 {
				return false
			}
		}
		return true
	}
	for {
		var ready []int
		for r := range n {
			if runnable(r) {
				ready = append(ready, r)
			}
		}
		if len(ready) == 0 {
			for r := range n {
				if len(streams[r]) > 0 {
					t.Fatalf("n=%d seed %d: deadlock: rank %d waits at %+v", n, seed, r, streams[r][0])
				}
			}
			return
		}
		// laggards now and then: a rank's stream runs several steps in a row
		r := ready[rng.IntN(len(ready))]
		for burst := 1 + rng.IntN(3); burst > 0 && runnable(r); burst-- {
			s := streams[r][0]
			streams[r] = streams[r][1:]
			l := s.launch
			lo, hi := seg(r)
			switch {
			case s.write:
				for i := range count {
					bufs[r][i] = val(l, r, i)
				}
			case s.mark:
				for i := lo; i < hi; i++ {
					if bufs[r][i] != sum(l, i) {
						t.Fatalf("n=%d seed %d: rank %d's pinned copy of launch %d [%d] = %g, want %g", n, seed, r, l, i, bufs[r][i], sum(l, i))
					}
					bufs[r][i] = mark(l, r, i)
				}
			case s.op.kind == ipcArrive:
				for q := range n {
					flags[q][s.op.phase][r] = s.e
				}
			case s.op.kind == ipcWait: // runnable: every peer's slot is at or past e
			case s.op.kind == ipcReduceKernel:
				for i := lo; i < hi; i++ {
					var v float32
					for k := range n {
						v += bufs[(r+1+k)%n][i]
					}
					if v != sum(l, i) {
						t.Fatalf("n=%d seed %d: rank %d reduced launch %d [%d] to %g, want %g: it read a rank's values of another launch", n, seed, r, l, i, v, sum(l, i))
					}
					bufs[r][i] = v
				}
			case s.op.kind == ipcGatherKernel:
				for i := range count {
					if owner[i] == r {
						continue
					}
					bufs[r][i] = bufs[owner[i]][i]
					if bufs[r][i] != final(l, i) {
						t.Fatalf("n=%d seed %d: rank %d gathered launch %d [%d] = %g from rank %d, want %g", n, seed, r, l, i, bufs[r][i], owner[i], final(l, i))
					}
				}
			default:
				panic(fmt.Sprintf("step %+v", s))
			}
		}
	}
}
