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
