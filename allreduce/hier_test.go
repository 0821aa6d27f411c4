package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHier_members(t *testing.T) {
	// 3 hosts × 2 local ranks: host 1 is ranks 2, 3; local rank 1's ring is ranks 1, 3, 5.
	if got := intraMembers(1, 2); fmt.Sprint(got) != "[2 3]" {
		t.Errorf("intraMembers(1, 2) = %v", got)
	}
	if got := interMembers(1, 2, 3); fmt.Sprint(got) != "[1 3 5]" {
		t.Errorf("interMembers(1, 2, 3) = %v", got)
	}
	for r := range 6 {
		if h, l := hierHost(r, 2), hierLocal(r, 2); hierRank(h, l, 2) != r || intraMembers(h, 2)[l] != r || interMembers(l, 2, 3)[h] != r {
			t.Errorf("rank %d: host %d local %d do not name it back", r, h, l)
		}
	}
	// The shares of a host's local ranks tile the buffer (local rank l carries the ring's owned
	// segment l+1: [3,6), [6,10), [0,3) of 10 among 3).
	covered := make([]int, 10)
	for l, want := range [][2]int{{3, 6}, {6, 10}, {0, 3}} {
		lo, hi := hierShare(10, 3, l)
		if lo != want[0] || hi != want[1] {
			t.Errorf("share of local rank %d = [%d,%d), want %v", l, lo, hi, want)
		}
		for i := lo; i < hi; i++ {
			covered[i]++
		}
	}
	if fmt.Sprint(covered) != "[1 1 1 1 1 1 1 1 1 1]" {
		t.Fatalf("shares cover %v", covered)
	}
}

// simElem is one element as a simulated rank holds it: the ranks whose contributions it has, as
// a bitmask (or) and as a sum of 1<<rank: both equal to all ranks means each added exactly once.
type simElem struct{ or, sum uint64 }

// simRing runs ring.go's schedule over members' buffers (indexed by ring position), on the
// elements [lo, hi): reduce-scatter when rs, then all-gather when ag, element by element as the
// ring moves segments, checking that each rank receives what its predecessor sends.
func simRing(t *testing.T, bufs [][]simElem, lo, hi int, rs, ag bool) {
	t.Helper()
	n := len(bufs)
	seg := func(i int) (int, int) { a, b := segment(hi-lo, n, i); return lo + a, lo + b }
	if rs {
		for s := range n - 1 {
			sent := make([][]simElem, n)
			for r := range n {
				a, b := seg(reduceScatterSendSeg(r, n, s))
				sent[r] = append([]simElem{}, bufs[r][a:b]...)
			}
			for r := range n {
				p := ringPrev(r, n)
				if reduceScatterSendSeg(p, n, s) != reduceScatterRecvSeg(r, n, s) {
					t.Fatalf("n=%d step %d: rank %d receives a segment its predecessor does not send", n, s, r)
				}
				a, _ := seg(reduceScatterRecvSeg(r, n, s))
				for i, e := range sent[p] {
					bufs[r][a+i].or |= e.or
					bufs[r][a+i].sum += e.sum
				}
			}
		}
	}
	if ag {
		for s := range n - 1 {
			sent := make([][]simElem, n)
			for r := range n {
				a, b := seg(allGatherSendSeg(r, n, s))
				sent[r] = append([]simElem{}, bufs[r][a:b]...)
			}
			for r := range n {
				a, _ := seg(allGatherRecvSeg(r, n, s))
				copy(bufs[r][a:], sent[ringPrev(r, n)])
			}
		}
	}
}

// TestHier_simulate runs the hierarchical schedule on whole clusters of several shapes: after the
// host's reduce-scatter each local rank holds its host's sum on its share, and at the end every
// rank holds every rank's contribution, each exactly once, on every element.
func TestHier_simulate(t *testing.T) {
	for _, shape := range [][2]int{{1, 1}, {1, 4}, {4, 1}, {2, 2}, {2, 3}, {3, 2}, {3, 4}, {4, 4}} {
		hosts, local := shape[0], shape[1]
		world := hosts * local
		for _, count := range []int{0, 1, 5, 37} {
			bufs := make([][]simElem, world)
			for r := range bufs {
				bufs[r] = make([]simElem, count)
				for i := range bufs[r] {
					bufs[r][i] = simElem{1 << r, 1 << r}
				}
			}
			pick := func(members []int) [][]simElem {
				out := make([][]simElem, len(members))
				for i, r := range members {
					out[i] = bufs[r]
				}
				return out
			}
			for h := range hosts {
				simRing(t, pick(intraMembers(h, local)), 0, count, true, false)
				var hostAll uint64
				for _, r := range intraMembers(h, local) {
					hostAll |= 1 << r
				}
				for l := range local {
					lo, hi := hierShare(count, local, l)
					if a, b := Segment(count, local, l); a != lo || b != hi {
						t.Fatalf("share of local rank %d is not its ring segment", l)
					}
					for i := lo; i < hi; i++ {
						if e := bufs[hierRank(h, l, local)][i]; e.or != hostAll || e.sum != hostAll {
							t.Fatalf("%d×%d count %d: rank %d holds %b/%b of its share's element %d, want host %d's %b",
								hosts, local, count, hierRank(h, l, local), e.or, e.sum, i, h, hostAll)
						}
					}
				}
			}
			for l := range local {
				lo, hi := hierShare(count, local, l)
				simRing(t, pick(interMembers(l, local, hosts)), lo, hi, true, true)
			}
			for h := range hosts {
				simRing(t, pick(intraMembers(h, local)), 0, count, false, true)
			}
			all := uint64(1)<<world - 1
			for r := range bufs {
				for i, e := range bufs[r] {
					if e.or != all || e.sum != all {
						t.Fatalf("%d×%d count %d: rank %d element %d holds %b (sum %b), want each of %b once",
							hosts, local, count, r, i, e.or, e.sum, all)
					}
				}
			}
		}
	}
}

// hierWorld is a world of hosts × local ranks: the world's groups, each rank's Hierarchy, and
// how to kill a rank (all three of its groups, as its process dying would).
type hierWorld struct {
	main []*Group
	hs   []*Hierarchy
	kill func(rank int)
}

// inprocHier builds the world and its rings over in-process networks.
func inprocHier(t *testing.T, hosts, local int, mod func(*Config)) hierWorld {
	t.Helper()
	n := hosts * local
	mk := func(size int) (*InprocNetwork, []*Group) {
		nw := NewInprocNetwork(size)
		gs := make([]*Group, size)
		for r := range gs {
			cfg := Config{Rank: r, WorldSize: size, Transport: nw.Transport(r), Timeout: 5 * time.Second, Logger: quietLogger()}
			if mod != nil {
				mod(&cfg)
			}
			g, err := NewGroup(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			gs[r] = g
			t.Cleanup(func() { g.Close() })
		}
		return nw, gs
	}
	mainNw, main := mk(n)
	intraNw := make([]*InprocNetwork, hosts)
	interNw := make([]*InprocNetwork, local)
	intra := make([][]*Group, hosts)
	inter := make([][]*Group, local)
	for h := range hosts {
		intraNw[h], intra[h] = mk(local)
	}
	for l := range local {
		interNw[l], inter[l] = mk(hosts)
	}
	w := hierWorld{main: main, hs: make([]*Hierarchy, n)}
	for r := range n {
		h, l := hierHost(r, local), hierLocal(r, local)
		hr, err := NewHierarchy(main[r], intra[h][l], inter[l][h])
		if err != nil {
			t.Fatal(err)
		}
		w.hs[r] = hr
	}
	w.kill = func(r int) {
		h, l := hierHost(r, local), hierLocal(r, local)
		mainNw.Kill(r)
		intraNw[h].Kill(l)
		interNw[l].Kill(h)
	}
	return w
}

// netHier builds the world over a network plane and each rank's rings with OpenHierarchy (loopback:
// every "host" is this one).
func netHier(t *testing.T, kind string, hosts, local int, mod func(*Config)) hierWorld {
	t.Helper()
	n := hosts * local
	var base []Config
	main := newGroups(t, kind, n, func(c *Config) {
		c.Timeout = 5 * time.Second
		if mod != nil {
			mod(c)
		}
		base = append(base, *c)
	})
	w := hierWorld{main: main, hs: make([]*Hierarchy, n)}
	cfgOf := func(r int) Config {
		for _, c := range base[len(base)-n:] {
			if c.Rank == r {
				return c
			}
		}
		t.Fatalf("no config for rank %d", r)
		return Config{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	noErrors(t, each(main, func(g *Group) error {
		h, err := OpenHierarchy(ctx, g, cfgOf(g.Rank()), local)
		if err == nil {
			mu.Lock()
			w.hs[g.Rank()] = h
			mu.Unlock()
			t.Cleanup(func() { h.Close() })
		}
		return err
	}))
	w.kill = func(r int) {
		for _, g := range []*Group{w.hs[r].intra, w.hs[r].inter, main[r]} {
			killRank(t, kind, g)
		}
	}
	return w
}

// checkHier all-reduces random buffers hierarchically and flat: the hierarchy's result is
// bit-identical on every rank and within the stated tolerance of the flat ring's: f32, each
// element within 2·n float32 roundings of the magnitudes added (either order's error is at most
// n−1 of them); a 16-bit wire, relative L2 distance 2e-3 (f16) or 1.6e-2 (bf16), twice each
// order's own bound against the exact sum.
func checkHier(t *testing.T, w hierWorld, size int, op Op, wire Wire) {
	t.Helper()
	n := len(w.main)
	in := inputs(n, size, uint64(size)+uint64(wire), false)
	hier, flat := make([][]float32, n), make([][]float32, n)
	for r := range in {
		hier[r] = append([]float32{}, in[r]...)
		flat[r] = append([]float32{}, in[r]...)
	}
	ctx := context.Background()
	noErrors(t, each(w.main, func(g *Group) error { return w.hs[g.Rank()].AllReduce(ctx, hier[g.Rank()], op, wire) }))
	noErrors(t, each(w.main, func(g *Group) error { return g.AllReduce(ctx, flat[g.Rank()], op, wire) }))
	for r := 1; r < n; r++ {
		for i := range hier[r] {
			if math.Float32bits(hier[r][i]) != math.Float32bits(hier[0][i]) {
				t.Fatalf("rank %d [%d] = %g, rank 0 has %g: not bit-identical", r, i, hier[r][i], hier[0][i])
			}
		}
	}
	div := 1.0
	if op == Avg {
		div = float64(n)
	}
	var dSq, refSq float64
	for i := range hier[0] {
		_, abs := sum64(in, i)
		d := math.Abs(float64(hier[0][i]) - float64(flat[0][i]))
		if wire == WireF32 {
			if bound := 2 * float64(n) * abs / div / (1 << 23); d > bound {
				t.Fatalf("n=%d size=%d [%d]: hierarchical %g, flat %g (bound %g)", n, size, i, hier[0][i], flat[0][i], bound)
			}
		}
		dSq += d * d
		refSq += float64(flat[0][i]) * float64(flat[0][i])
	}
	maxRel := 2e-3
	if wire == WireBF16 {
		maxRel = 1.6e-2
	}
	if wire != WireF32 && refSq > 0 {
		if rel := math.Sqrt(dSq / refSq); rel > maxRel {
			t.Fatalf("n=%d size=%d %s %s: relative L2 distance to the flat ring %.2e > %g", n, size, wire, op, rel, maxRel)
		}
	}
}

func TestHier_inproc(t *testing.T) {
	for _, shape := range [][2]int{{1, 1}, {1, 3}, {3, 1}, {2, 2}, {2, 3}, {3, 2}} {
		t.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(t *testing.T) {
			w := inprocHier(t, shape[0], shape[1], func(c *Config) { c.ChunkBytes = 1000 })
			for _, size := range []int{0, 1, 7, 1001, 20000} {
				checkHier(t, w, size, Sum, WireF32)
				checkHier(t, w, size, Avg, WireF32)
				checkHier(t, w, size, Avg, WireF16)
				checkHier(t, w, size, Sum, WireBF16)
			}
		})
	}
}

// Two "hosts" of two local ranks over real loopback planes: the rings meet through OpenHierarchy.
func TestHier_loopback(t *testing.T) {
	for _, kind := range []string{"grpc", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			w := netHier(t, kind, 2, 2, func(c *Config) { c.ChunkBytes = 4096 })
			for _, size := range []int{3, 1 << 16} {
				checkHier(t, w, size, Avg, WireF32)
				checkHier(t, w, size, Avg, WireF16)
			}
		})
	}
}

func TestHier_openRefusesBadLocal(t *testing.T) {
	gs := newGroups(t, "inproc", 4, nil)
	_, err := OpenHierarchy(context.Background(), gs[0], Config{MasterAddr: "127.0.0.1:1"}, 3)
	if err == nil || !strings.Contains(err.Error(), "LOCAL_WORLD_SIZE 3") {
		t.Fatalf("got %v, want LOCAL_WORLD_SIZE 3 refused", err)
	}
}

// A rank killed while the others all-reduce: every other rank fails within the timeout naming
// it by its global rank, whichever ring it was waiting in — its own host's ring, or a ring
// between hosts that the dead rank is not in (told by the abort its own host's ring sends on).
func TestHier_killedRank(t *testing.T) {
	for _, kind := range []string{"inproc", "tcp"} {
		for _, victim := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("%s/victim%d", kind, victim), func(t *testing.T) {
				timeout := 3 * time.Second
				mod := func(c *Config) { c.Timeout = timeout; c.ChunkBytes = 4096 }
				var w hierWorld
				if kind == "inproc" {
					w = inprocHier(t, 2, 2, mod)
				} else {
					w = netHier(t, kind, 2, 2, mod)
				}
				n := len(w.main)
				bufs := inputs(n, 1<<16, 3, false)
				ctx := context.Background()
				noErrors(t, each(w.main, func(g *Group) error { return w.hs[g.Rank()].AllReduce(ctx, bufs[g.Rank()], Sum, WireF16) }))
				start := time.Now()
				errs := each(w.main, func(g *Group) error {
					if g.Rank() == victim {
						w.kill(victim)
						return nil
					}
					return w.hs[g.Rank()].AllReduce(ctx, bufs[g.Rank()], Sum, WireF16)
				})
				if el := time.Since(start); el > timeout+time.Second {
					t.Errorf("failure took %v to surface (timeout %v)", el, timeout)
				}
				for r, err := range errs {
					if r == victim {
						continue
					}
					var ce *CollectiveError
					if !errors.As(err, &ce) || ce.Peer != victim || !FailedByPeer(err) {
						t.Fatalf("rank %d: got %v, want an error naming rank %d", r, err, victim)
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("peer rank %d", victim)) || !strings.Contains(err.Error(), "hierarchical all-reduce") {
						t.Fatalf("rank %d: message %q does not name the peer and the hierarchy", r, err)
					}
					// Broken: the next call fails at once, naming the same rank.
					err2 := w.hs[r].AllReduce(ctx, bufs[r], Sum, WireF16)
					if !errors.As(err2, &ce) || ce.Peer != victim {
						t.Fatalf("rank %d: after failure got %v", r, err2)
					}
				}
			})
		}
	}
}

// Inside and Between composed by hand (as ddp's device path across hosts composes them, its
// reduce-scatter and all-gather inside the host on the device) give Hierarchy.AllReduce's bits:
// the same three collectives on the same segments.
func TestHier_ringsComposeAsAllReduce(t *testing.T) {
	w := inprocHier(t, 2, 3, func(c *Config) { c.ChunkBytes = 1000 })
	n := len(w.main)
	for _, size := range []int{1, 7, 5003} {
		in := inputs(n, size, uint64(size), false)
		whole, parts := make([][]float32, n), make([][]float32, n)
		for r := range in {
			whole[r] = append([]float32{}, in[r]...)
			parts[r] = append([]float32{}, in[r]...)
		}
		ctx := context.Background()
		noErrors(t, each(w.main, func(g *Group) error { return w.hs[g.Rank()].AllReduce(ctx, whole[g.Rank()], Avg, WireF16) }))
		noErrors(t, each(w.main, func(g *Group) error {
			h, buf := w.hs[g.Rank()], parts[g.Rank()]
			in, bt := h.Inside(), h.Between()
			if in.Size() != 3 || bt.Size() != 2 || in.Rank() != g.Rank()%3 || bt.Rank() != g.Rank()/3 {
				return fmt.Errorf("rank %d: inside %d of %d, between %d of %d", g.Rank(), in.Rank(), in.Size(), bt.Rank(), bt.Size())
			}
			if err := in.ReduceScatter(ctx, buf, Avg, WireF16); err != nil {
				return err
			}
			lo, hi := Segment(len(buf), in.Size(), in.Rank())
			if err := bt.AllReduce(ctx, buf[lo:hi], Avg, WireF16); err != nil {
				return err
			}
			return in.AllGatherSegments(ctx, buf, WireF16)
		}))
		for r := range n {
			for i := range whole[r] {
				if math.Float32bits(whole[r][i]) != math.Float32bits(parts[r][i]) {
					t.Fatalf("size %d rank %d [%d]: composed %g, Hierarchy.AllReduce %g", size, r, i, parts[r][i], whole[r][i])
				}
			}
		}
	}
}

// A rank killed while the others use the rings apart: a rank whose two rings both exclude it
// (host 1's local rank 0, waiting inside its host) still fails naming it, told by the abort its
// host's other rank sends on after its ring between hosts lost the victim.
func TestHier_ringsLinked(t *testing.T) {
	const victim = 1 // host 0, local rank 1
	w := inprocHier(t, 2, 2, func(c *Config) { c.Timeout = 3 * time.Second })
	ctx := context.Background()
	start := time.Now()
	errs := each(w.main, func(g *Group) error {
		h := w.hs[g.Rank()]
		switch g.Rank() {
		case victim:
			w.kill(victim)
			return nil
		case 3: // host 1, local rank 1: between hosts with the victim
			return h.Between().AllReduce(ctx, make([]float32, 100), Sum, WireF32)
		default: // rank 0 inside its host with the victim; rank 2 inside host 1 with rank 3
			_, err := h.Inside().AllGather(ctx, []byte{1})
			return err
		}
	})
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("failure took %v to surface", el)
	}
	for r, err := range errs {
		if r == victim {
			continue
		}
		var ce *CollectiveError
		if !errors.As(err, &ce) || ce.Peer != victim {
			t.Fatalf("rank %d: got %v, want an error naming rank %d", r, err, victim)
		}
		if !strings.Contains(err.Error(), "of the ring") {
			t.Fatalf("rank %d: %q does not say which ring", r, err)
		}
	}
}

// A port picked for a ring stays listening until the ring's rank 0 takes it over: no other
// listener can take it in between (the race that once made TestHier_loopback fail with "address
// already in use" while other tests ran), and closing what was handed over is the ring's affair.
func TestHier_heldPort(t *testing.T) {
	h, err := holdPort("127.0.0.1", true)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("tcp", h.addr); err == nil {
		l.Close()
		t.Fatalf("%s could be listened on while held", h.addr)
	}
	l, err := h.listen("tcp", h.addr)
	if err != nil || l.Addr().String() != h.addr {
		t.Fatalf("hand-over: %v, %v", l, err)
	}
	defer l.Close()
	h.close() // handed over: not closed here
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatalf("the handed-over listener was closed: %v", err)
	}
	c.Close()
	other, err := h.listen("tcp", "127.0.0.1:0") // anything else is a listener of its own
	if err != nil || other.Addr().String() == h.addr {
		t.Fatalf("another address: %v, %v", other, err)
	}
	other.Close()
	// Not held (Config.GRPCListen set): picked and released at once.
	f, err := holdPort("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("tcp", f.addr); err != nil {
		t.Fatalf("an unheld port is still taken: %v", err)
	} else {
		l.Close()
	}
}
