package auth

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/link"
)

// closer counts its Close calls: a connection the guard closed to make room.
type closer struct{ closed int }

func (c *closer) Close() error { c.closed++; return nil }

// The bounds alone, no connection: a source gets MaxPendingPerSource slots, the listener
// MaxPending in all, a source that authenticated before the reserve beyond them, and Done gives
// a slot back.
func TestGuard_bounds(t *testing.T) {
	g := NewGuard(slog.New(&leaftest.RecordingHandler{}), time.Hour)
	defer g.Stop()
	var flood []*Slot
	for i := range MaxPendingPerSource {
		s := g.Admit("10.0.0.66", &closer{})
		if s == nil {
			t.Fatalf("flood source refused at its %d-th connection, bound %d", i+1, MaxPendingPerSource)
		}
		flood = append(flood, s)
	}
	if g.Admit("10.0.0.66", &closer{}) != nil {
		t.Fatalf("a source got more than %d slots", MaxPendingPerSource)
	}
	s := g.Admit("10.0.0.2", &closer{})
	if s == nil {
		t.Fatal("another source refused while one source is at its bound")
	}
	g.Done(s, true) // 10.0.0.2 proved the token: known from now on
	// Fill the listener with sources that hold one slot each.
	for i := 0; g.total < MaxPending; i++ {
		if g.Admit(fmt.Sprintf("10.1.0.%d", i), &closer{}) == nil {
			t.Fatalf("refused below the total bound (%d pending)", g.total)
		}
	}
	if s := g.Admit("10.0.0.2", &closer{}); s == nil {
		t.Fatal("a source that authenticated before refused: it has the reserve")
	} else {
		g.Done(s, true)
	}
	g.Done(flood[0], false)
	if g.Admit("10.0.0.3", &closer{}) == nil {
		t.Fatal("a freed slot was not given to the next source")
	}
	if g.total != MaxPending {
		t.Fatalf("%d pending, want %d", g.total, MaxPending)
	}
}

// At the listener's bound a new source takes the slot of the oldest connection of the unknown
// source holding the most slots, and that connection is closed; its Done gives nothing back.
// A source holding as many slots as every other gets nothing, and sources that authenticated
// before are never pushed out.
func TestGuard_fullListenerMakesRoomForANewSource(t *testing.T) {
	g := NewGuard(slog.New(&leaftest.RecordingHandler{}), time.Hour)
	defer g.Stop()
	known := g.Admit("10.0.0.2", &closer{})
	g.Done(known, true)
	var knownSlots []*closer
	for range MaxPendingPerSource {
		c := &closer{}
		g.Admit("10.0.0.2", c) // the known source's handshakes in progress
		knownSlots = append(knownSlots, c)
	}
	big := make([]*closer, 10) // one source with 10 slots
	bigSlots := make([]*Slot, 10)
	for i := range big {
		big[i] = &closer{}
		bigSlots[i] = g.Admit("10.0.0.66", big[i])
	}
	var small []*closer // the rest, one slot each
	for i := 0; g.total < MaxPending; i++ {
		c := &closer{}
		if g.Admit(fmt.Sprintf("10.1.0.%d", i), c) == nil {
			t.Fatal("refused below the bound")
		}
		small = append(small, c)
	}
	// 9 newcomers take the big source's slots, oldest first, down to one slot.
	for i := range 9 {
		if g.Admit(fmt.Sprintf("10.9.0.%d", i), &closer{}) == nil {
			t.Fatalf("newcomer %d refused at the bound while 10.0.0.66 holds %d slots", i, 10-i)
		}
		for j, c := range big {
			if want := j <= i; (c.closed == 1) != want {
				t.Fatalf("after %d newcomers: 10.0.0.66's connection %d closed %d times", i+1, j, c.closed)
			}
		}
	}
	g.Done(bigSlots[0], false) // a pushed-out connection's handshake ends: no slot given back
	if g.total != MaxPending {
		t.Fatalf("%d pending, want %d", g.total, MaxPending)
	}
	// Every unknown source holds one slot: a source that holds one already gets none...
	if g.Admit("10.1.0.0", &closer{}) != nil {
		t.Fatal("a source holding a slot took another at the bound")
	}
	// ...a new one takes the oldest: 10.0.0.66's last, then the small sources' in order.
	if g.Admit("10.9.1.0", &closer{}) == nil || big[9].closed != 1 {
		t.Fatal("a new source did not take the oldest slot of the sources holding one")
	}
	if g.Admit("10.9.1.1", &closer{}) == nil || small[0].closed != 1 || small[1].closed != 0 {
		t.Fatal("a new source did not take the oldest slot of the sources holding one")
	}
	for i, c := range knownSlots {
		if c.closed != 0 {
			t.Fatalf("a known source's handshake %d was closed", i)
		}
	}
	if g.total != MaxPending {
		t.Fatalf("%d pending, want %d", g.total, MaxPending)
	}
}

// A flood of refusals from one source logs one line per period and a summary of the rest:
// "suppressed N refusals from SRC in the last T"; another source is logged on its own; the
// process-wide counters count them all.
func TestGuard_refusalsRateLimited(t *testing.T) {
	rec := &leaftest.RecordingHandler{}
	g := NewGuard(slog.New(rec), 10*time.Second) // its ticker never fires within the test
	defer g.Stop()
	now := time.Unix(1000, 0)
	g.mu.Lock()
	g.now = func() time.Time { return now }
	g.mu.Unlock()
	logged0, supp0 := Refusals()
	for range 1000 {
		g.Refuse("10.0.0.66", "allreduce: refused connection with a wrong or missing token")
	}
	g.Refuse("10.0.0.7", "allreduce: refused connection with a wrong or missing token")
	if n := rec.Count("wrong or missing token"); n != 2 {
		t.Fatalf("%d refusal lines for 1001 refusals from 2 sources in one period, want 2: %v", n, rec.Msgs())
	}
	now = now.Add(11 * time.Second)
	g.Refuse("10.0.0.66", "allreduce: refused connection with a wrong or missing token")
	if !rec.Has("suppressed 999 refusals from 10.0.0.66 in the last 11s") {
		t.Fatalf("no summary of the suppressed refusals: %v", rec.Msgs())
	}
	for range 5 {
		g.Refuse("10.0.0.66", "x")
	}
	g.Stop() // the last period's count is logged on the way out
	if !rec.Has("suppressed 5 refusals from 10.0.0.66") {
		t.Fatalf("the last period's suppressed refusals were not logged: %v", rec.Msgs())
	}
	logged, supp := Refusals()
	if logged-logged0 != 3 || supp-supp0 != 1004 {
		t.Fatalf("counters: %d logged, %d suppressed; want 3 and 1004", logged-logged0, supp-supp0)
	}
}

// pipeListener is an in-memory listener whose connections come from a source the test names.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

type srcConn struct {
	net.Conn
	src net.Addr
}

func (c srcConn) RemoteAddr() net.Addr { return c.src }

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 29500} }

// dial connects from host src; the test's end of the pipe.
func (l *pipeListener) dial(t *testing.T, src string, port int) net.Conn {
	a, b := net.Pipe()
	select {
	case l.ch <- srcConn{Conn: b, src: &net.TCPAddr{IP: net.ParseIP(src), Port: port}}:
	case <-time.After(5 * time.Second):
		t.Fatal("the listener stopped accepting")
	}
	return a
}

// A host holding idle connections (connect, send nothing) to the rendezvous port, more than the
// listener's total bound, does not stall a peer that proves the token: the peer's connection
// is accepted at once, while the flood still holds its connections. The flood's connections
// are closed within HelloDeadline, not the handshake's Deadline.
func TestListener_idleFloodDoesNotStall(t *testing.T) {
	pl := newPipeListener()
	rec := &leaftest.RecordingHandler{}
	cfg := link.Config{Rank: 0, WorldSize: 2, Token: "tok", Timeout: time.Minute}
	lis := NewListener(pl, cfg, slog.New(rec))
	defer lis.Close()

	var flood []net.Conn
	for i := range 3 * MaxPending {
		flood = append(flood, pl.dial(t, "10.0.0.66", 40000+i))
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	start := time.Now()
	c := pl.dial(t, "10.0.0.2", 50000)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	errc := make(chan error, 1)
	go func() { errc <- Dial(c, "tok", PlaneGRPC, 1, 2) }()
	acc := make(chan net.Conn, 1)
	go func() {
		got, err := lis.Accept()
		if err == nil {
			acc <- got
		}
	}()
	if err := <-errc; err != nil {
		t.Fatalf("the peer's handshake during the flood: %v", err)
	}
	select {
	case got := <-acc:
		got.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the peer's connection was not accepted")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the peer waited %v behind the flood", d)
	}
	// The flood's first connections were admitted and are still open; they close at
	// HelloDeadline.
	first := flood[0]
	first.SetReadDeadline(time.Now().Add(Deadline))
	t0 := time.Now()
	if _, err := first.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF", err)
	}
	if d := time.Since(t0); d > HelloDeadline+time.Second {
		t.Errorf("an idle connection was held %v, want at most HelloDeadline=%v", d, HelloDeadline)
	}
	if n := rec.Count("too many connections authenticating"); n != 1 {
		t.Errorf("%d lines for %d connections closed at the bound, want 1 (rate-limited)", n, 3*MaxPending-MaxPendingPerSource)
	}
}

// A flood from 100 sources, each holding an idle connection (connect, send nothing), fills the
// listener's bound; a peer from a host that never authenticated before is still admitted and
// completes its handshake at once, long before the flood's connections reach HelloDeadline.
// (Before the guard made room, the peer's connection was closed at once: the test fails there.)
func TestListener_floodFromManySourcesAdmitsANewPeer(t *testing.T) {
	pl := newPipeListener()
	rec := &leaftest.RecordingHandler{}
	cfg := link.Config{Rank: 0, WorldSize: 2, Token: "tok", Timeout: time.Minute}
	lis := NewListener(pl, cfg, slog.New(rec))
	defer lis.Close()

	var flood []net.Conn
	for i := range 100 {
		flood = append(flood, pl.dial(t, fmt.Sprintf("10.2.0.%d", i+1), 40000))
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	start := time.Now()
	c := pl.dial(t, "10.3.0.1", 50000)
	defer c.Close()
	c.SetDeadline(time.Now().Add(HelloDeadline))
	errc := make(chan error, 1)
	go func() { errc <- Dial(c, "tok", PlaneGRPC, 1, 2) }()
	acc := make(chan net.Conn, 1)
	go func() {
		if got, err := lis.Accept(); err == nil {
			acc <- got
		}
	}()
	if err := <-errc; err != nil {
		t.Fatalf("a new peer's handshake while 100 sources hold the listener's slots: %v", err)
	}
	select {
	case got := <-acc:
		got.Close()
	case <-time.After(HelloDeadline):
		t.Fatal("the peer's connection was not accepted")
	}
	d := time.Since(start)
	if d >= HelloDeadline {
		t.Errorf("the peer waited %v: as long as the flood's idle connections live", d)
	}
	t.Logf("the new peer's handshake took %v", d)
	// The oldest flood connection was closed to make room: it reads EOF at once.
	flood[0].SetReadDeadline(time.Now().Add(HelloDeadline / 2))
	if _, err := flood[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest flood connection: read %v, want EOF (closed to make room)", err)
	}
	// Each connection the guard closed is one refusal: the eviction's line (the flood's own
	// connections past MaxPending evicted older ones too), never a second refusal from the
	// evicted handshake's read error; closing the listener closes the flood's pending
	// handshakes without a refusal each (Close waits for them, then flushes the counts).
	logged0, supp0 := Refusals()
	lis.Close()
	evictions := rec.Count("closed an unauthenticated connection to make room")
	if evictions == 0 {
		t.Errorf("no eviction was logged: %v", rec.Msgs())
	}
	if n := rec.Count("refused connection"); n != 0 {
		t.Errorf("%d refusals logged for handshakes the guard itself closed, want 0", n)
	}
	if rec.Has("suppressed") {
		t.Errorf("the evicted handshake was counted again as a suppressed refusal: %v", rec.Msgs())
	}
	if logged, supp := Refusals(); logged != logged0 || supp != supp0 {
		t.Errorf("closing the listener counted %d refusals and %d suppressed, want none", logged-logged0, supp-supp0)
	}
}

// A handshake whose peer has proved the token (Proven, before the listener answers) is no longer
// evictable: a full listener makes room by closing another unproven connection, never one that
// is being answered; and an evicted handshake that proves the token afterwards is told to fail
// (Proven false), so no answer goes out on a closed connection.
func TestGuard_provenHandshakeIsNotEvicted(t *testing.T) {
	g := NewGuard(slog.New(&leaftest.RecordingHandler{}), time.Hour)
	defer g.Stop()
	// "unix" holds the most slots: its oldest is the first victim, unless proven.
	var local []*Slot
	var conns []*closer
	for range MaxPendingPerSource {
		c := &closer{}
		local = append(local, g.Admit("unix", c))
		conns = append(conns, c)
	}
	if !g.Proven(local[0]) {
		t.Fatal("Proven of a pending handshake returned false")
	}
	for i := 0; g.total < MaxPending; i++ {
		if g.Admit(fmt.Sprintf("10.1.0.%d", i), &closer{}) == nil {
			t.Fatalf("refused below the total bound (%d pending)", g.total)
		}
	}
	if g.Admit("10.9.9.9", &closer{}) == nil {
		t.Fatal("a new source was refused at the listener's bound")
	}
	if conns[0].closed > 0 {
		t.Fatal("the proven handshake's connection was closed to make room")
	}
	if conns[1].closed == 0 {
		t.Fatal("the oldest unproven connection of the source holding the most was not the one closed")
	}
	if g.Proven(local[1]) {
		t.Fatal("Proven of an evicted handshake returned true: the listener would answer on a closed connection")
	}
	g.Done(local[0], true)
	g.Done(local[1], false)
	if !g.known["unix"] {
		t.Fatal("the proven source is not known after Done")
	}
}
