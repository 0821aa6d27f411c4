package tensor

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// MemStats are a device's memory counters, in bytes, like torch.cuda.memory_stats.
type MemStats struct {
	Allocated int64 // held by live tensors (rounded to the allocator's size classes)
	Reserved  int64 // obtained from the system: allocated plus cached free blocks
	Peak      int64 // highest Allocated since the start or the last ResetPeak
	Limit     int64 // cap on Reserved set by SetLimit (0 = none)
	Allocs    int64 // Alloc calls
	Frees     int64 // Free calls
	RawAllocs int64 // allocations the cache could not serve (system calls on the GPU)
	Cached    int64 // bytes in cached free blocks (Reserved − Allocated)
}

// OOMError is what Alloc panics with when memory runs out; CatchOOM recovers it as an error.
type OOMError struct {
	Device    string
	Tag       string
	Requested int64
	Allocated int64
	Reserved  int64
	Limit     int64 // 0 when the hardware ran out, not a budget
	Free      int64 // free memory on the card, when known (-1 otherwise)
}

func (e *OOMError) Error() string {
	what := "device memory"
	if e.Limit > 0 {
		what = fmt.Sprintf("the memory budget of %s", FormatBytes(e.Limit))
	}
	s := fmt.Sprintf("tensor: out of memory on %s allocating %s for %q: %s exceeded (allocated %s, reserved %s",
		e.Device, FormatBytes(e.Requested), e.Tag, what, FormatBytes(e.Allocated), FormatBytes(e.Reserved))
	if e.Free >= 0 {
		s += ", free on the card " + FormatBytes(e.Free)
	}
	return s + ")"
}

// IsOOM reports whether err is (or wraps) an out-of-memory error.
func IsOOM(err error) bool {
	var e *OOMError
	return errors.As(err, &e)
}

// CatchOOM runs f and returns the *OOMError it panicked with, if any. Other panics pass through.
func CatchOOM(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(*OOMError); ok {
				err = e
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}

// LiveBlock describes one allocated, not yet freed tensor.
type LiveBlock struct {
	Tag   string
	DType DType
	Shape []int
	Bytes int64
}

// FormatBytes prints n with a binary unit: 1.50 MiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return fmt.Sprintf("%.2f PiB", f/unit)
}

// SizeClass rounds a request to the size of the block the allocator obtains for it from the
// system: multiples of 512 B below 1 MiB; above that, multiples of a 64th of the request's power
// of two, at most 2 MiB (PyTorch's caching allocator rounds its large blocks to 2 MiB): at most
// 1.6% and 2 MiB over the request. Until session 18 the step above 1 MiB was an eighth (up to
// 12.5% over), which held a ResNet-50's fp32 largest batch under 16 GiB to 188 (PyTorch 192):
// between 176 and 188 samples every large activation rounded to the same class, and at 189 they
// all stepped up together (docs/perf-resnet-gpu.md).
func SizeClass(n int64) int64 {
	if n <= 0 {
		return 512
	}
	if n < 1<<20 {
		return (n + 511) &^ 511
	}
	p := int64(1)
	for p*2 <= n {
		p *= 2
	}
	step := min(p/64, 2<<20)
	return (n + step - 1) / step * step
}

// reuseLimit is the largest cached block a request of class c may take: c itself below 1 MiB
// (the small classes are exact), up to an eighth more above (a block freed by a slightly larger
// tensor serves the next slightly smaller one, as the coarser classes of old did, and what it
// holds over the request is at most that eighth).
func reuseLimit(c int64) int64 {
	if c < 1<<20 {
		return c
	}
	return c + c/8
}

// Pool is the caching allocator, and the memory half of every Device, written once: a device
// embeds a *Pool made by NewPool, which gives it Alloc, Free, Stats, ResetPeak, SetLimit,
// EmptyCache, Live and SetObserver (Observable). Freed blocks go to a free list per block size and
// are handed out again before asking the system: a request takes a cached block of its own class,
// else the smallest cached one up to reuseLimit (blocks are never split). The pool does the counting; the device supplies
// the raw allocation. Not safe for concurrent use (nor is the device: one goroutine drives it).
type Pool struct {
	dev   Device                            // the device tensors are made for
	raw   func(bytes int64) (Buffer, error) // obtain a block from the system
	drop  func(Buffer)                      // give a block back to the system
	free  map[int64][]Buffer                // block size → cached blocks
	sizes []int64                           // the block sizes with cached blocks, ascending
	live  map[Buffer]LiveBlock
	stats MemStats
	// freeOnCard, when set, reports the card's free memory for OOM messages.
	freeOnCard func() int64
	// observe, when set, sees every Alloc and Free (SetObserver).
	observe func(AllocEvent)
}

// AllocEvent is one allocation or free as the pool saw it, for memory timelines (--memory-plot).
type AllocEvent struct {
	Free      bool   // a Free; otherwise an Alloc
	Tag       string // the block's tag
	Bytes     int64  // the block's size class
	Allocated int64  // the pool's allocated bytes after the event
	Buffer    Buffer // the block itself (to tell blocks apart; only the device looks inside)
}

// Observable is an optional Device ability: SetObserver(f) makes the device call f after every
// Alloc and Free, on the goroutine driving the device (nil removes it). f must not allocate on
// that device. Both devices have it, through their Pool.
type Observable interface {
	SetObserver(f func(AllocEvent))
}

// SetObserver installs f (nil removes it); see Observable.
func (p *Pool) SetObserver(f func(AllocEvent)) { p.observe = f }

// NewPool makes dev's pool over raw/drop: tensors from Alloc belong to dev, which embeds the pool.
func NewPool(dev Device, raw func(int64) (Buffer, error), drop func(Buffer)) *Pool {
	return &Pool{dev: dev, raw: raw, drop: drop, free: map[int64][]Buffer{}, live: map[Buffer]LiveBlock{}}
}

// Alloc: see Device.
func (p *Pool) Alloc(dt DType, tag string, shape ...int) *Tensor {
	n := Numel(shape)
	b := p.get(int64(n)*int64(dt.Size()), tag, dt, shape)
	return NewTensor(p.dev, b, dt, tag, shape)
}

// Free: see Device.
func (p *Pool) Free(t *Tensor) {
	if t == nil {
		return
	}
	if !t.owner {
		panic(fmt.Sprintf("tensor: Free of view %s", t))
	}
	p.put(t.buf)
	t.buf = nil
}

// SetFreeOnCard installs the query used in OOM messages.
func (p *Pool) SetFreeOnCard(f func() int64) { p.freeOnCard = f }

// get returns a block of at least bytes, panicking with *OOMError when none can be had.
func (p *Pool) get(bytes int64, tag string, dt DType, shape []int) Buffer {
	class := SizeClass(bytes)
	b, size := p.cached(class)
	if b == nil {
		size = class
		// A budget bounds what is held from the device, as a card of that size would: the
		// reserved bytes (allocated + cached). Over it, the cache goes back first and the
		// allocation is tried once more, as PyTorch's caching allocator does before it reports
		// out of memory.
		if p.stats.Limit > 0 && p.stats.Reserved+class > p.stats.Limit {
			p.EmptyCache()
			if p.stats.Reserved+class > p.stats.Limit {
				panic(p.oom(bytes, tag))
			}
		}
		var err error
		b, err = p.raw(class)
		if err != nil { // the system is out: give back the cache and try once more
			p.EmptyCache()
			b, err = p.raw(class)
			if err != nil {
				panic(p.oom(bytes, tag))
			}
		}
		p.stats.Reserved += class
		p.stats.RawAllocs++
	}
	p.stats.Allocs++
	p.stats.Allocated += size
	if p.stats.Allocated > p.stats.Peak {
		p.stats.Peak = p.stats.Allocated
	}
	p.live[b] = LiveBlock{Tag: tag, DType: dt, Shape: append([]int(nil), shape...), Bytes: size}
	if p.observe != nil {
		p.observe(AllocEvent{Tag: tag, Bytes: size, Allocated: p.stats.Allocated, Buffer: b})
	}
	return b
}

// cached takes a cached block for a request of class: one of that size, else the smallest up to
// reuseLimit(class); nil when there is none. It returns the block's size.
func (p *Pool) cached(class int64) (Buffer, int64) {
	size := class
	if len(p.free[class]) == 0 {
		i, _ := slices.BinarySearch(p.sizes, class)
		if i == len(p.sizes) || p.sizes[i] > reuseLimit(class) {
			return nil, 0
		}
		size = p.sizes[i]
	}
	list := p.free[size]
	b := list[len(list)-1]
	if len(list) == 1 {
		delete(p.free, size)
		i, _ := slices.BinarySearch(p.sizes, size)
		p.sizes = slices.Delete(p.sizes, i, i+1)
	} else {
		p.free[size] = list[:len(list)-1]
	}
	p.stats.Cached -= size
	return b, size
}

func (p *Pool) oom(bytes int64, tag string) *OOMError {
	free := int64(-1)
	if p.freeOnCard != nil {
		free = p.freeOnCard()
	}
	return &OOMError{Device: p.dev.Name(), Tag: tag, Requested: bytes, Allocated: p.stats.Allocated,
		Reserved: p.stats.Reserved, Limit: p.stats.Limit, Free: free}
}

// put caches a block obtained from get.
func (p *Pool) put(b Buffer) {
	blk, ok := p.live[b]
	if !ok {
		panic("tensor: free of a block that is not live (double free?)")
	}
	delete(p.live, b)
	if len(p.free[blk.Bytes]) == 0 {
		i, _ := slices.BinarySearch(p.sizes, blk.Bytes)
		p.sizes = slices.Insert(p.sizes, i, blk.Bytes)
	}
	p.free[blk.Bytes] = append(p.free[blk.Bytes], b)
	p.stats.Allocated -= blk.Bytes
	p.stats.Cached += blk.Bytes
	p.stats.Frees++
	if p.observe != nil {
		p.observe(AllocEvent{Free: true, Tag: blk.Tag, Bytes: blk.Bytes, Allocated: p.stats.Allocated, Buffer: b})
	}
}

// EmptyCache returns every cached block to the system.
func (p *Pool) EmptyCache() {
	for class, list := range p.free {
		for _, b := range list {
			p.drop(b)
			p.stats.Reserved -= class
			p.stats.Cached -= class
		}
		delete(p.free, class)
	}
	p.sizes = p.sizes[:0]
}

func (p *Pool) Stats() MemStats      { return p.stats }
func (p *Pool) ResetPeak()           { p.stats.Peak = p.stats.Allocated }
func (p *Pool) SetLimit(bytes int64) { p.stats.Limit = bytes }

// Live lists live blocks, largest first.
func (p *Pool) Live() []LiveBlock {
	out := make([]LiveBlock, 0, len(p.live))
	for _, b := range p.live {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Tag < out[j].Tag
	})
	return out
}

// MemorySummary renders a device's counters and its live blocks grouped by tag, like
// torch.cuda.memory_summary.
func MemorySummary(d Device) string {
	s := d.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "|%s|\n", strings.Repeat("=", 62))
	fmt.Fprintf(&b, "| %-60s |\n", "goddp memory summary, device "+d.Name())
	fmt.Fprintf(&b, "|%s|\n", strings.Repeat("-", 62))
	row := func(k string, v int64) { fmt.Fprintf(&b, "| %-30s %29s |\n", k, FormatBytes(v)) }
	row("allocated", s.Allocated)
	row("peak allocated", s.Peak)
	row("reserved", s.Reserved)
	row("cached (reserved - allocated)", s.Cached)
	if s.Limit > 0 {
		row("limit", s.Limit)
	}
	fmt.Fprintf(&b, "| %-30s %29d |\n", "alloc calls", s.Allocs)
	fmt.Fprintf(&b, "| %-30s %29d |\n", "free calls", s.Frees)
	fmt.Fprintf(&b, "| %-30s %29d |\n", "system allocations", s.RawAllocs)
	byTag := map[string]int64{}
	count := map[string]int{}
	for _, l := range d.Live() {
		byTag[l.Tag] += l.Bytes
		count[l.Tag]++
	}
	tags := make([]string, 0, len(byTag))
	for t := range byTag {
		tags = append(tags, t)
	}
	sort.Slice(tags, func(i, j int) bool { return byTag[tags[i]] > byTag[tags[j]] })
	if len(tags) > 0 {
		fmt.Fprintf(&b, "|%s|\n", strings.Repeat("-", 62))
		fmt.Fprintf(&b, "| %-40s %5s %13s |\n", "live tensors by tag", "n", "bytes")
		for _, t := range tags {
			name := t
			if len(name) > 40 {
				name = name[:37] + "..."
			}
			fmt.Fprintf(&b, "| %-40s %5d %13s |\n", name, count[t], FormatBytes(byTag[t]))
		}
	}
	fmt.Fprintf(&b, "|%s|\n", strings.Repeat("=", 62))
	return b.String()
}
