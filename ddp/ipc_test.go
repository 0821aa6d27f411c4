package ddp

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

func TestDevicePlan(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, count := range []int{0, 1, 7, 1000} {
			for r := range n {
				p := DevicePlan(count, n, r)
				if err := p.Check(count); err != nil {
					t.Fatalf("n=%d count=%d rank %d: %v", n, count, r, err)
				}
				if lo, hi := allreduce.Segment(count, n, r); p.Segments[r] != [2]int{lo, hi} || p.Order[n-1] != r {
					t.Fatalf("n=%d rank %d: plan %+v is not the ring's segment and order", n, r, p)
				}
			}
		}
	}
}

// fakeIPC is a CPU device with the IPCDevice ability, its "device all-reduce" the kernel's
// algorithm in Go (ipc_kernels.go: reduce this rank's segment in the plan's order in f32, meet,
// copy the other segments from their owners, meet) over the ranks' host copies of their buffers,
// the meetings a barrier of the world's goroutines. It checks the wiring on the CPU: the plan, the
// handle exchange over the group, and that the schedule gives the host ring's bits.
type fakeIPC struct {
	*cpu.Device
	w *fakeWorld
}

type fakeWorld struct {
	mu      sync.Mutex
	ranks   map[uint64]*fakeReducer
	barrier *cyclicBarrier
}

type fakeReducer struct {
	d     *fakeIPC
	buf   *tensor.Tensor
	plan  tensor.IPCPlan
	id    uint64
	peers []*fakeReducer
	vals  []float32
}

func (f *fakeIPC) NewIPCReducer(buf *tensor.Tensor, plan tensor.IPCPlan) (tensor.IPCReducer, error) {
	if err := plan.Check(buf.Len()); err != nil {
		return nil, err
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	r := &fakeReducer{d: f, buf: buf, plan: plan, id: uint64(len(f.w.ranks)) + 100, vals: make([]float32, buf.Len())}
	f.w.ranks[r.id] = r
	return r, nil
}

func (r *fakeReducer) Handle() []byte { return binary.LittleEndian.AppendUint64(nil, r.id) }

func (r *fakeReducer) Connect(handles [][]byte) error {
	r.d.w.mu.Lock()
	defer r.d.w.mu.Unlock()
	for q, h := range handles {
		p := r.d.w.ranks[binary.LittleEndian.Uint64(h)]
		if p == nil || p.plan.Rank != q {
			return fmt.Errorf("handle %d is not rank %d's", q, q)
		}
		r.peers = append(r.peers, p)
	}
	return nil
}

func (r *fakeReducer) AllReduce(avg bool) {
	n, me := r.plan.Size, r.plan.Rank
	r.d.Download(r.vals, r.buf)
	r.d.w.barrier.wait()
	div := float32(1)
	if avg {
		div = float32(n)
	}
	s := r.plan.Segments[me]
	for i := s[0]; i < s[1]; i++ {
		v := r.peers[r.plan.Order[0]].vals[i]
		for _, q := range r.plan.Order[1:] {
			v += r.peers[q].vals[i]
		}
		if avg {
			v /= div
		}
		r.vals[i] = v
	}
	r.d.w.barrier.wait()
	for q, p := range r.peers {
		if q != me {
			s := r.plan.Segments[q]
			copy(r.vals[s[0]:s[1]], p.vals[s[0]:s[1]])
		}
	}
	r.d.w.barrier.wait()
	r.d.Upload(r.buf, r.vals)
}

func (r *fakeReducer) Close() error { return nil }

// cyclicBarrier releases its n goroutines each time all have arrived.
type cyclicBarrier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n, in   int
	release int
}

func newCyclicBarrier(n int) *cyclicBarrier {
	b := &cyclicBarrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *cyclicBarrier) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	gen := b.release
	if b.in++; b.in == b.n {
		b.in, b.release = 0, b.release+1
		b.cond.Broadcast()
		return
	}
	for gen == b.release {
		b.cond.Wait()
	}
}

// The device all-reduce's schedule, wired through NewDeviceReducer on a device that runs the
// kernel's algorithm: every rank ends with the host ring's f32 bits (Sum and Avg), because the
// plan adds in the ring's order.
func TestNewDeviceReducer_isTheRing(t *testing.T) {
	for _, W := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(W), func(t *testing.T) {
			w := &fakeWorld{ranks: map[uint64]*fakeReducer{}, barrier: newCyclicBarrier(W)}
			count := 1001
			in := make([][]float32, W)
			for r := range in {
				in[r] = make([]float32, count)
				for i := range in[r] {
					in[r][i] = float32(math.Sin(float64(i*W+r)*0.37)) * float32(1+r)
				}
			}
			type out struct{ dev, ring []float32 }
			res := inprocWorld(t, W, 1, func(r int, comm Comm, _ []Comm) out {
				d := &fakeIPC{Device: cpu.New(), w: w}
				buf := d.Alloc(tensor.F32, "ipc", count)
				red, err := NewDeviceReducer(context.Background(), d, buf, comm)
				if err != nil {
					t.Error(err)
					return out{}
				}
				defer red.Close()
				var o out
				for _, avg := range []bool{false, true} {
					d.Upload(buf, in[r])
					red.AllReduce(avg)
					dev := make([]float32, count)
					d.Download(dev, buf)
					ring := append([]float32{}, in[r]...)
					op := allreduce.Sum
					if avg {
						op = allreduce.Avg
					}
					if err := comm.AllReduce(context.Background(), ring, op, allreduce.WireF32); err != nil {
						t.Error(err)
					}
					o.dev, o.ring = append(o.dev, dev...), append(o.ring, ring...)
				}
				return o
			})
			for r, o := range res {
				if len(o.dev) != 2*count {
					t.Fatalf("rank %d: no result", r)
				}
				for i := range o.dev {
					if math.Float32bits(o.dev[i]) != math.Float32bits(o.ring[i]) || math.Float32bits(o.dev[i]) != math.Float32bits(res[0].dev[i]) {
						t.Fatalf("rank %d [%d]: device schedule %g, host ring %g, rank 0 %g", r, i, o.dev[i], o.ring[i], res[0].dev[i])
					}
				}
			}
		})
	}
}

// A rank whose device cannot reduce over IPC buffers: every rank fails, naming it.
func TestNewDeviceReducer_namesTheRankThatCannot(t *testing.T) {
	W := 3
	w := &fakeWorld{ranks: map[uint64]*fakeReducer{}, barrier: newCyclicBarrier(W)}
	errs := inprocWorld(t, W, 1, func(r int, comm Comm, _ []Comm) error {
		var d tensor.Device = &fakeIPC{Device: cpu.New(), w: w}
		if r == 1 {
			d = cpu.New()
		}
		_, err := NewDeviceReducer(context.Background(), d, d.Alloc(tensor.F16, "ipc", 10), comm)
		return err
	})
	for r, err := range errs {
		want := "rank 1 could not make its reducer"
		if r == 1 {
			want = "has no all-reduce over IPC buffers"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want %q", r, err, want)
		}
	}
}
