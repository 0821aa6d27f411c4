package tensor

import (
	"strings"
	"testing"
)

// nameOnly is a Device that only has a name: enough for a Pool, which calls nothing else.
type nameOnly struct{ Device }

func (nameOnly) Name() string { return "test" }

type hostBuf struct{ n int64 }

func (b *hostBuf) Bytes() int64 { return b.n }

func newTestPool() *Pool {
	return NewPool(nameOnly{}, func(n int64) (Buffer, error) { return &hostBuf{n}, nil }, func(Buffer) {})
}

func panics(t *testing.T, what, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s did not panic", what)
		}
		if s, _ := r.(string); !strings.Contains(s, want) {
			t.Fatalf("%s panicked with %v, want %q", what, r, want)
		}
	}()
	f()
}

// The pool alone: tensors belong to its device, a freed block serves the next request of its size
// class, views and double frees are refused, the limit raises an OOMError that names the device.
func TestPool_allocFreeAndRefusals(t *testing.T) {
	p := newTestPool()
	a := p.Alloc(F32, "a", 10, 100)
	if a.Device().Name() != "test" || !a.Owner() || a.Len() != 1000 || a.Bytes() != 4000 {
		t.Fatalf("Alloc gave %s on %s, owner %v", a, a.Device().Name(), a.Owner())
	}
	if s := p.Stats(); s.Allocated != SizeClass(4000) || s.Reserved != s.Allocated || s.Allocs != 1 {
		t.Fatalf("after one Alloc: %+v", s)
	}
	panics(t, "Free of a view", "view", func() { p.Free(a.View(0, 10)) })
	buf := a.Buffer()
	p.Free(a)
	if a.Buffer() != nil {
		t.Fatal("Free left the tensor its buffer")
	}
	p.Free(nil)
	b := p.Alloc(F16, "b", 2000) // same size class
	if b.Buffer() != buf || p.Stats().RawAllocs != 1 {
		t.Fatalf("the freed block was not reused: %+v", p.Stats())
	}
	c := NewTensor(p.dev, b.Buffer(), F32, "b", []int{0}) // a caller freeing by buffer (autobatch)
	p.Free(c)
	panics(t, "a second Free of the block", "not live", func() { p.Free(b) })
	p.SetLimit(1 << 20)
	err := CatchOOM(func() { p.Alloc(F32, "huge", 1<<20) })
	if !IsOOM(err) || !strings.Contains(err.Error(), "on test") {
		t.Fatalf("over the limit: %v", err)
	}
	if s := p.Stats(); s.Allocated != 0 || s.Frees != 2 {
		t.Fatalf("at the end: %+v", s)
	}
}

func TestTensor_viewsAndShapes(t *testing.T) {
	p := newTestPool()
	x := p.Alloc(F32, "x", 2, 3, 4)
	if x.Rows() != 6 || x.Cols() != 4 || x.Dim(-2) != 3 {
		t.Fatalf("%s: rows %d cols %d dim(-2) %d", x, x.Rows(), x.Cols(), x.Dim(-2))
	}
	if r, c := MatDims(x); r != 6 || c != 4 {
		t.Fatalf("MatDims %d, %d", r, c)
	}
	v := x.View(4, 5, 4)
	if v.Offset() != 4 || v.Owner() || !SameShape(v, v.Reshape(20, 1).Reshape(5, 4)) || SameShape(v, x) {
		t.Fatalf("view %s at %d", v, v.Offset())
	}
	panics(t, "a view past the end", "out of range", func() { x.View(20, 5) })
	panics(t, "a reshape to another size", "changes the size", func() { x.Reshape(5, 5) })
	panics(t, "a negative dimension", "negative", func() { Numel([]int{2, -1}) })
	panics(t, "CheckLen of different sizes", "differ in size", func() { CheckLen("Add", x, v) })
	panics(t, "CheckFloat of i32", "not a float tensor", func() { CheckFloat("ReLU", p.Alloc(I32, "ids", 3)) })
}

// A budget bounds the reserved bytes (allocated + cached), not only the allocated ones: an
// allocation that would take the pool over it first gives the cache back and is retried (it
// succeeds when the live blocks leave room), and fails only when the live blocks alone leave
// none. Reserved never exceeds the budget.
func TestPool_budgetBoundsReserved(t *testing.T) {
	p := newTestPool()
	const MiB = 1 << 20
	p.SetLimit(4 * MiB)
	a := p.Alloc(F32, "a", 2*MiB/4) // 2 MiB live
	b := p.Alloc(F32, "b", MiB/4)   // 1 MiB live
	p.Free(a)                       // 2 MiB cached: reserved 3 MiB
	if s := p.Stats(); s.Reserved != 3*MiB || s.Cached != 2*MiB {
		t.Fatalf("after freeing a: %+v", s)
	}
	// 2.5 MiB (a class of its own): allocated 1 + 2.5 ≤ 4, but reserved 3 + 2.5 > 4: the cached
	// 2 MiB go back first, then it fits (reserved 3.5 MiB).
	c := p.Alloc(F32, "c", 5*MiB/8)
	if s := p.Stats(); s.Reserved != 1*MiB+SizeClass(5*MiB/2) || s.Cached != 0 || s.Reserved > s.Limit {
		t.Fatalf("after c: %+v (want the cache given back and reserved within the budget)", s)
	}
	// The live blocks alone leave no room: out of memory, naming the budget.
	err := CatchOOM(func() { p.Alloc(F32, "d", MiB/4) })
	if !IsOOM(err) || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("over the budget with live blocks: %v", err)
	}
	p.Free(b)
	p.Free(c)
	if s := p.Stats(); s.Reserved > s.Limit || s.Allocated != 0 {
		t.Fatalf("at the end: %+v", s)
	}
}

// SizeClass: below 1 MiB, 512-byte multiples; above, at most a 64th of the request's power of two
// and 2 MiB over it (the bound that moved ResNet-50's fp32 largest batch: session 18), never
// under it, and monotone.
func TestSizeClass_bounds(t *testing.T) {
	const MiB = 1 << 20
	prev := int64(0)
	for _, n := range []int64{1, 511, 512, 513, MiB - 1, MiB, MiB + 1, 3*MiB + 7, 64*MiB + 1, 603717632, 606928896, 5 << 30} {
		c := SizeClass(n)
		p := int64(1)
		for p*2 <= n {
			p *= 2
		}
		over := int64(511)
		if n >= MiB {
			over = min(p/64, 2*MiB) - 1
		}
		if c < n || c-n > over || c < prev {
			t.Fatalf("SizeClass(%d) = %d: want in [n, n+%d] and ≥ %d", n, c, over, prev)
		}
		prev = c
	}
	// ResNet-50's layer-1 activations at fp32 batch 188 and 189 (N·56·56·256·4 bytes): one class
	// each, 2 MiB apart at most — they were 576 and 640 MiB with the eighths.
	if a, b := SizeClass(188*3211264), SizeClass(189*3211264); b-a > 4*MiB {
		t.Fatalf("batch 188 → %d, 189 → %d bytes: a step of %d", a, b, b-a)
	}
}

// A request takes a cached block of its class, else the smallest cached block up to an eighth
// larger (its whole size counted as allocated, and back to its own list when freed), never a
// smaller one or one past the eighth; small classes take only their own size.
func TestPool_reusesLargerBlocksWithinAnEighth(t *testing.T) {
	const MiB = 1 << 20
	p := newTestPool()
	big := p.Alloc(F32, "big", (110*MiB)/4)
	mid := p.Alloc(F32, "mid", (104*MiB)/4)
	small := p.Alloc(F32, "small", (96*MiB)/4)
	bigBuf, midBuf := big.Buffer(), mid.Buffer()
	p.Free(big)
	p.Free(mid)
	p.Free(small)
	raw := p.Stats().RawAllocs
	// 100 MiB: 96 is too small, 104 and 110 are within the eighth (112.5): the smaller is taken.
	x := p.Alloc(F32, "x", (100*MiB)/4)
	if x.Buffer() != midBuf || p.Stats().RawAllocs != raw {
		t.Fatalf("100 MiB did not take the 104 MiB block: %+v", p.Stats())
	}
	if s := p.Stats(); s.Allocated != 104*MiB || s.Cached != 206*MiB {
		t.Fatalf("after taking 104 MiB for 100: %+v", s)
	}
	// 90 MiB: 96 MiB is within its eighth (101.25).
	y := p.Alloc(F32, "y", (90*MiB)/4)
	// 120 MiB: 110 is too small: a new block.
	z := p.Alloc(F32, "z", (120*MiB)/4)
	if s := p.Stats(); s.RawAllocs != raw+1 || s.Allocated != (104+96+120)*MiB {
		t.Fatalf("after 90 and 120 MiB: %+v", s)
	}
	// 80 MiB: 110 is past its eighth (90): a new block, though one is cached.
	w := p.Alloc(F32, "w", (80*MiB)/4)
	if p.Stats().RawAllocs != raw+2 {
		t.Fatalf("80 MiB took a block more than an eighth larger: %+v", p.Stats())
	}
	p.Free(x) // back as a 104 MiB block, which a 104 MiB request takes
	if v := p.Alloc(F32, "v", (104*MiB)/4); v.Buffer() != midBuf {
		t.Fatal("the 104 MiB block did not go back to its own size's list")
	}
	// 110 MiB is still cached, and a request of exactly its class takes it.
	if u := p.Alloc(F32, "u", (110*MiB)/4); u.Buffer() != bigBuf {
		t.Fatal("the 110 MiB block was not reused by a request of its class")
	}
	for _, q := range []*Tensor{y, z, w} {
		p.Free(q)
	}
	// Below 1 MiB only the exact class: a 4 KiB block does not serve 3.5 KiB.
	a := p.Alloc(F32, "a", (4096)/4)
	ab := a.Buffer()
	p.Free(a)
	if b := p.Alloc(F32, "b", (3584)/4); b.Buffer() == ab {
		t.Fatal("a small request took a larger small block")
	}
	if b := p.Alloc(F32, "b", (4000)/4); b.Buffer() != ab {
		t.Fatal("a small request did not take its own class's block")
	}
	p.EmptyCache()
	if s := p.Stats(); s.Cached != 0 || len(p.sizes) != 0 || len(p.free) != 0 {
		t.Fatalf("after EmptyCache: %+v, %d sizes listed", s, len(p.sizes))
	}
}
