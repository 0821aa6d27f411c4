package data

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"
)

// seqDataset has N samples of 2 features; sample i is (i, -i), label i%7.
type seqDataset struct{ n int }

func (d seqDataset) Len() int       { return d.n }
func (d seqDataset) Layout() Layout { return Layout{Features: 2, Labels: true} }
func (d seqDataset) Fill(b *Batch, idx []int) {
	for i, j := range idx {
		b.X[2*i], b.X[2*i+1] = float32(j), float32(-j)
		b.Y[i] = int32(j % 7)
	}
	b.Size = len(idx)
}

func mustLoader(t *testing.T, ds Dataset, cfg LoaderConfig) *Loader {
	t.Helper()
	l, err := NewLoader(ds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// take reads n batches, checking each batch's data matches its indices, and
// returns copies of their indices and tags.
type got struct {
	epoch, step, micro int
	idx                []int
}

func take(t *testing.T, l *Loader, n int) []got {
	t.Helper()
	var out []got
	for i := 0; i < n; i++ {
		b, err := l.Next(context.Background())
		if err != nil {
			t.Fatalf("Next %d: %v", i, err)
		}
		for k, j := range b.Indices {
			if b.X[2*k] != float32(j) || b.Y[k] != int32(j%7) {
				t.Fatalf("batch %v sample %d holds %v/%d, want index %d", b, k, b.X[2*k], b.Y[k], j)
			}
		}
		out = append(out, got{b.Epoch, b.Step, b.Micro, append([]int(nil), b.Indices...)})
		l.Release(b)
	}
	return out
}

func TestLoader_shardingContract(t *testing.T) {
	const N, b, k, W = 100, 4, 2, 3 // G = 24, 4 steps per epoch, 4 samples dropped
	ds := seqDataset{N}
	G := b * k * W
	for epoch := 0; epoch < 2; epoch++ {
		perm := Permutation(N, 9, epoch)
		seen := make(map[int]int)
		for r := 0; r < W; r++ {
			l := mustLoader(t, ds, LoaderConfig{MicroBatch: b, Accum: k, Rank: r, World: W, Seed: 9, Shuffle: true, Workers: 3, Start: LoaderState{Epoch: epoch}})
			if l.StepsPerEpoch() != N/G {
				t.Fatalf("StepsPerEpoch = %d, want %d", l.StepsPerEpoch(), N/G)
			}
			for i, g := range take(t, l, l.StepsPerEpoch()*k) {
				s, m := i/k, i%k
				if g.epoch != epoch || g.step != s || g.micro != m {
					t.Fatalf("rank %d batch %d tagged %d/%d/%d", r, i, g.epoch, g.step, g.micro)
				}
				off := s*G + (m*W+r)*b
				for q, j := range g.idx {
					if j != perm[off+q] {
						t.Fatalf("rank %d step %d micro %d: idx %v, want perm[%d:]", r, s, m, g.idx, off)
					}
					seen[j]++
				}
			}
		}
		if len(seen) != N/G*G {
			t.Errorf("epoch %d: %d distinct samples, want %d", epoch, len(seen), N/G*G)
		}
		for j, c := range seen {
			if c != 1 {
				t.Errorf("epoch %d: sample %d seen %d times", epoch, j, c)
			}
		}
	}
}

// One process with b' = G, k = 1 sees, per step, exactly the samples W ranks
// with b and k see together, in the order micro-major, rank-minor.
func TestLoader_singleProcessEquivalence(t *testing.T) {
	const N, b, k, W = 90, 3, 2, 2
	ds := seqDataset{N}
	single := take(t, mustLoader(t, ds, LoaderConfig{MicroBatch: b * k * W, Seed: 3, Shuffle: true}), 15)
	ranks := make([][]got, W)
	for r := range ranks {
		ranks[r] = take(t, mustLoader(t, ds, LoaderConfig{MicroBatch: b, Accum: k, Rank: r, World: W, Seed: 3, Shuffle: true, Workers: 2}), 15*k)
	}
	for s, one := range single {
		var joined []int
		for m := 0; m < k; m++ {
			for r := 0; r < W; r++ {
				joined = append(joined, ranks[r][s*k+m].idx...)
			}
		}
		if !equalInts(one.idx, joined) {
			t.Fatalf("step %d: single %v, ranks %v", s, one.idx, joined)
		}
	}
}

func TestLoader_deterministicAcrossWorkers(t *testing.T) {
	ds := seqDataset{257}
	ref := take(t, mustLoader(t, ds, LoaderConfig{MicroBatch: 8, Seed: 5, Shuffle: true, Workers: 1, Prefetch: 1}), 100)
	for _, w := range []int{2, 4, 7} {
		other := take(t, mustLoader(t, ds, LoaderConfig{MicroBatch: 8, Seed: 5, Shuffle: true, Workers: w, Prefetch: 5}), 100)
		for i := range ref {
			if !equalInts(ref[i].idx, other[i].idx) || ref[i].epoch != other[i].epoch || ref[i].step != other[i].step {
				t.Fatalf("workers=%d batch %d differs", w, i)
			}
		}
	}
	// Epochs differ from each other, and no shuffle means index order.
	if equalInts(ref[0].idx, ref[32].idx) || ref[32].epoch != 1 {
		t.Errorf("epoch 1 starts like epoch 0 (or batch 32 is not epoch 1: %d)", ref[32].epoch)
	}
	plain := take(t, mustLoader(t, ds, LoaderConfig{MicroBatch: 8, Workers: 3}), 2)
	if !equalInts(plain[1].idx, []int{8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Errorf("unshuffled batch 1 = %v", plain[1].idx)
	}
}

func TestLoader_resume(t *testing.T) {
	ds := seqDataset{200}
	cfg := LoaderConfig{MicroBatch: 5, Accum: 3, Rank: 1, World: 2, Seed: 11, Shuffle: true, Workers: 2}
	a := mustLoader(t, ds, cfg)
	take(t, a, 3*10) // 10 optimizer steps: crosses into epoch 1 (6 steps per epoch)
	st := a.State()
	if st != (LoaderState{Epoch: 1, Step: 4}) {
		t.Fatalf("State = %+v, want epoch 1 step 4", st)
	}
	rest := take(t, a, 20)
	cfg.Start = st
	b := mustLoader(t, ds, cfg)
	again := take(t, b, 20)
	for i := range rest {
		if !equalInts(rest[i].idx, again[i].idx) || rest[i].step != again[i].step || rest[i].micro != again[i].micro {
			t.Fatalf("resumed batch %d: %+v, want %+v", i, again[i], rest[i])
		}
	}
	// Mid-step, State is the step in progress.
	take(t, b, 1)
	if st := b.State(); st.Step != again[len(again)-1].step+1 && st.Step != 0 {
		t.Errorf("mid-step State %+v", st)
	}
	if _, err := NewLoader(ds, LoaderConfig{MicroBatch: 5, Start: LoaderState{Step: 40}}); err == nil {
		t.Error("resume past the epoch's end accepted")
	}
}

func TestLoader_evalSharding(t *testing.T) {
	ds := seqDataset{23}
	const W, b = 2, 4 // 6 global batches, the last has 3 samples
	var all []int
	for r := 0; r < W; r++ {
		l, err := NewEvalLoader(ds, LoaderConfig{MicroBatch: b, Rank: r, World: W, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			bt, err := l.Next(context.Background())
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if bt.Step != r+n*W {
				t.Errorf("rank %d got global batch %d, want %d", r, bt.Step, r+n*W)
			}
			all = append(all, bt.Indices...)
			n++
		}
		if n != l.StepsPerEpoch() || n != 3 {
			t.Errorf("rank %d: %d batches, StepsPerEpoch %d, want 3", r, n, l.StepsPerEpoch())
		}
		l.Close()
	}
	sort.Ints(all)
	for i, j := range all {
		if i != j || len(all) != 23 {
			t.Fatalf("eval union %v, want 0..22 once each", all)
		}
	}
	l, _ := NewEvalLoader(ds, LoaderConfig{MicroBatch: b, MaxBatches: 2})
	defer l.Close()
	if n := len(drain(t, l)); n != 2 {
		t.Errorf("MaxBatches 2 gave %d", n)
	}
}

func drain(t *testing.T, l *Loader) []*Batch {
	var out []*Batch
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}

func TestLoader_contextCloseAndLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	l, err := NewLoader(seqDataset{1000}, LoaderConfig{MicroBatch: 10, Workers: 4, Prefetch: 3, Shuffle: true})
	if err != nil {
		t.Fatal(err)
	}
	first := take(t, l, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next on a cancelled ctx: %v", err)
	}
	// The cancelled call lost nothing: the next batch is number 3.
	if b := take(t, l, 1)[0]; b.step != 3 || equalInts(b.idx, first[2].idx) {
		t.Errorf("after cancel got step %d", b.step)
	}
	l.Close()
	l.Close()
	if _, err := l.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

// slowDataset is seqDataset whose Fill takes a while and records how many Fills ran at once.
type slowDataset struct {
	seqDataset
	cur, peak *atomic.Int32
}

func (d slowDataset) Fill(b *Batch, idx []int) {
	n := d.cur.Add(1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	time.Sleep(30 * time.Millisecond)
	d.seqDataset.Fill(b, idx)
	d.cur.Add(-1)
}

// Every worker fills a batch while the trainer is busy, whatever Prefetch (a queue of Prefetch
// jobs kept all but Prefetch+1 of 6 workers idle).
func TestLoader_everyWorkerBusy(t *testing.T) {
	ds := slowDataset{seqDataset{1000}, new(atomic.Int32), new(atomic.Int32)}
	l := mustLoader(t, ds, LoaderConfig{MicroBatch: 4, Workers: 6, Prefetch: 1, Shuffle: true})
	time.Sleep(300 * time.Millisecond) // the trainer's step: ten Fills' time
	if p := ds.peak.Load(); p != 6 {
		t.Errorf("%d Fills at once with 6 workers, prefetch 1: want 6", p)
	}
	take(t, l, 20) // the order and contents are still the plan's
}

// countingAlloc counts buffers and frees, standing in for a pinned allocator.
type countingAlloc struct{ allocs, frees int }

func (a *countingAlloc) Float32s(n int) []float32 { a.allocs++; return make([]float32, n) }
func (a *countingAlloc) Int32s(n int) []int32     { a.allocs++; return make([]int32, n) }
func (a *countingAlloc) Free(any)                 { a.frees++ }

func TestLoader_releaseReusesBuffers(t *testing.T) {
	a := &countingAlloc{}
	l, err := NewLoader(seqDataset{1000}, LoaderConfig{MicroBatch: 10, Workers: 2, Prefetch: 2, Alloc: a})
	if err != nil {
		t.Fatal(err)
	}
	take(t, l, 300) // releases each batch
	l.Close()
	// Each batch is 2 buffers (X, Y); in flight at most prefetch + workers + a few.
	if a.allocs > 2*8 {
		t.Errorf("%d buffers allocated for 300 batches: not recycled", a.allocs)
	}
	if a.frees != a.allocs {
		t.Errorf("Close freed %d of %d buffers", a.frees, a.allocs)
	}
}

func TestPermutation(t *testing.T) {
	p := Permutation(1000, 1, 0)
	if !equalInts(p, Permutation(1000, 1, 0)) || equalInts(p, Permutation(1000, 1, 1)) || equalInts(p, Permutation(1000, 2, 0)) {
		t.Error("permutation not a function of (seed, epoch) alone")
	}
	s := append([]int(nil), p...)
	sort.Ints(s)
	for i := range s {
		if s[i] != i {
			t.Fatal("not a permutation")
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func BenchmarkLoader_MNISTShaped(b *testing.B) {
	ds := &Classification{N: 60000, Features: 784, X: make([]float32, 60000*784), Y: make([]int32, 60000)}
	l, _ := NewLoader(ds, LoaderConfig{MicroBatch: 128, Workers: 2, Prefetch: 4, Shuffle: true})
	defer l.Close()
	for b.Loop() {
		bt, _ := l.Next(context.Background())
		l.Release(bt)
	}
}

// failAt fails to fill the batch that holds sample bad.
type failAt struct {
	seqDataset
	bad int
}

func (d failAt) Fill(b *Batch, idx []int) {
	d.seqDataset.Fill(b, idx)
	for _, j := range idx {
		if j == d.bad {
			b.Err = errors.New("sample unreadable")
		}
	}
}

// Peek shows the batch Next returns next without moving the stream: Peeks interleaved anywhere
// (twice in a row too) leave the sequence and State as Next alone gives them, Next returns the
// very batch Peek showed, and a batch that could not be filled is Peek's error and then Next's.
func TestLoader_peek(t *testing.T) {
	ds := seqDataset{120}
	cfg := LoaderConfig{MicroBatch: 4, Accum: 2, Rank: 0, World: 2, Seed: 3, Shuffle: true, Workers: 3}
	want := take(t, mustLoader(t, ds, cfg), 25)
	l := mustLoader(t, ds, cfg)
	ctx := context.Background()
	for i := range want {
		st := l.State()
		var peeked *Batch
		if i%3 != 2 {
			p, err := l.Peek(ctx)
			if err != nil {
				t.Fatalf("Peek %d: %v", i, err)
			}
			if i%3 == 1 {
				again, _ := l.Peek(ctx)
				if again != p {
					t.Fatalf("Peek %d twice: two batches", i)
				}
			}
			if l.State() != st {
				t.Fatalf("Peek %d moved State %+v -> %+v", i, st, l.State())
			}
			peeked = p
		}
		b, err := l.Next(ctx)
		if err != nil {
			t.Fatalf("Next %d: %v", i, err)
		}
		if peeked != nil && b != peeked {
			t.Fatalf("Next %d returned another batch than Peek showed", i)
		}
		if g := (got{b.Epoch, b.Step, b.Micro, b.Indices}); g.step != want[i].step || g.micro != want[i].micro || !equalInts(g.idx, want[i].idx) {
			t.Fatalf("batch %d with Peeks: %+v, without: %+v", i, g, want[i])
		}
		l.Release(b)
	}

	// A cancelled Peek loses nothing.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Peek(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Peek with a cancelled context: %v", err)
	}
	b, err := l.Next(ctx)
	if w := take(t, mustLoader(t, ds, cfg), 26)[25]; err != nil || b.Step != w.step || !equalInts(b.Indices, w.idx) {
		t.Fatalf("Next after a cancelled Peek: %v, want batch 25 of the stream", err)
	}

	bad := mustLoader(t, failAt{seqDataset{40}, 0}, LoaderConfig{MicroBatch: 40})
	if _, err := bad.Peek(ctx); err == nil || err.Error() != "sample unreadable" {
		t.Fatalf("Peek of an unfillable batch: %v", err)
	}
	if _, err := bad.Next(ctx); err == nil || err.Error() != "sample unreadable" {
		t.Fatalf("Next after Peek of an unfillable batch: %v", err)
	}
	l.Close()
	if _, err := l.Peek(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Peek after Close: %v", err)
	}
}
