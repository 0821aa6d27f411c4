package auth

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// What a listener spends on connections it has not authenticated yet, and what it logs of
// them. A host that holds idle connections to a rank's port (connect, send nothing), or opens
// them faster than they fail, must not take what the group's own peers need to join:
//
//   - the first bytes (the hello) must arrive within HelloDeadline of the accept, not the whole
//     handshake's Deadline: a real dialler sends its hello at once;
//   - at most MaxPendingPerSource handshakes run at once from one source (the remote host; all
//     Unix-domain connections are one source), at most MaxPending in all; more are closed at once;
//   - a source that has completed a handshake before (an authenticated peer: the same host's
//     ranks, or a host whose ranks joined) may use KnownReserve slots beyond MaxPending;
//   - when the listener is at its bound, a connection from a source under its own bound is still
//     admitted: it takes the slot of the oldest pending handshake of the unknown source that holds
//     the most slots, if that source holds more than the newcomer's source does, and that
//     connection is closed. So a flood, from any number of sources, cannot keep a new peer out:
//     a peer that joins for the first time is admitted at once, and since a real dialler sends
//     its hello at once and completes in a round trip or two, it is pushed out only if the flood
//     opens about MaxPending connections within those milliseconds (oldest first, and sources
//     holding more slots first); what gets closed is the flood's idle connections. Sources that
//     authenticated before are never pushed out.
//
// Refusals are logged at most once per RefusalEvery per source; the ones suppressed are
// counted (Refusals) and summed up in one line, "suppressed N refusals from SRC in the last
// T", when the source's period ends.

const (
	MaxPendingPerSource = 16              // concurrent unauthenticated connections from one source
	KnownReserve        = 32              // slots beyond MaxPending for sources that authenticated before
	HelloDeadline       = 2 * time.Second // bound on the wait for the hello's bytes
	RefusalEvery        = 10 * time.Second
	maxSources          = 4096 // sources remembered (known, or with refusals counted); more share one entry
	otherSources        = "other sources"
)

var (
	refusalsLogged     atomic.Uint64
	refusalsSuppressed atomic.Uint64
)

// Refusals is what this process's listeners refused since it started: the refusals logged and
// the ones suppressed by the rate limit (each still counted once).
func Refusals() (logged, suppressed uint64) {
	return refusalsLogged.Load(), refusalsSuppressed.Load()
}

// Source is the source a connection is counted under: its remote host, or "unix".
func Source(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil || a.Network() == "unix" {
		return "unix"
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// Guard is one listener's bounds and refusal log (see above). Its zero value is not usable:
// NewGuard makes one, Stop ends it.
type Guard struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	total   int
	seq     uint64
	pending map[string][]*Slot   // handshakes in progress by source, oldest first
	known   map[string]bool      // sources that authenticated
	refused map[string]*refusals // refusals logged in the current period, by source

	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// Slot is one admitted connection's place in the guard, from Admit to Done.
type Slot struct {
	src     string
	c       io.Closer
	seq     uint64 // admission order
	gone    bool   // no longer pending: evicted to make room, or proven (under Guard.mu)
	evicted bool   // closed to make room (under Guard.mu)
	closed  bool   // its connection closed by the guard: evicted, or by ClosePending (under Guard.mu)
}

type refusals struct {
	since      time.Time
	suppressed int
}

// NewGuard returns a guard that logs to log; every > 0 sets the refusal log's period (0 =
// RefusalEvery). It flushes its suppressed counts every period until Stop.
func NewGuard(log *slog.Logger, every time.Duration) *Guard {
	if every <= 0 {
		every = RefusalEvery
	}
	g := &Guard{log: log, every: every, now: time.Now, pending: map[string][]*Slot{}, known: map[string]bool{},
		refused: map[string]*refusals{}, stop: make(chan struct{})}
	g.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				g.flush(true)
				return
			case <-t.C:
				g.flush(false)
			}
		}
	})
	return g
}

// Stop logs what was suppressed and ends the guard's ticker; idempotent.
func (g *Guard) Stop() {
	g.once.Do(func() { close(g.stop) })
	g.wg.Wait()
}

// Admit takes a slot for an unauthenticated connection c from src; nil (and the refusal
// logged) when its source is at its bound, or the listener is and no other source holds more
// slots than src (see above: the oldest connection of the source holding the most is closed to
// make room). Each Slot must be given back with Done.
func (g *Guard) Admit(src string, c io.Closer) *Slot {
	g.mu.Lock()
	limit := MaxPending
	if g.known[src] {
		limit += KnownReserve
	}
	n := len(g.pending[src])
	var victim *Slot
	ok := n < MaxPendingPerSource
	if ok && g.total >= limit {
		victim = g.victimLocked(src, n)
		ok = victim != nil
		if ok {
			g.removeLocked(victim)
			victim.gone, victim.evicted, victim.closed = true, true, true
		}
	}
	var s *Slot
	if ok {
		g.seq++
		s = &Slot{src: src, c: c, seq: g.seq}
		g.pending[src] = append(g.pending[src], s)
		g.total++
	}
	g.mu.Unlock()
	if victim != nil {
		victim.c.Close()
		g.Refuse(victim.src, "allreduce: closed an unauthenticated connection to make room for another source's")
	}
	if !ok {
		g.Refuse(src, "allreduce: too many connections authenticating at once; closed one")
	}
	return s
}

// victimLocked is the slot to give to a connection from src, which holds n: the oldest of the
// unknown source other than src holding the most slots, more than n; nil when there is none.
func (g *Guard) victimLocked(src string, n int) *Slot {
	var v *Slot
	most := n
	for s, slots := range g.pending {
		if s == src || g.known[s] || len(slots) == 0 {
			continue
		}
		if len(slots) > most || (len(slots) == most && v != nil && slots[0].seq < v.seq) {
			most, v = len(slots), slots[0]
		}
	}
	return v
}

func (g *Guard) removeLocked(s *Slot) {
	slots := g.pending[s.src]
	for i, o := range slots {
		if o == s {
			slots = append(slots[:i], slots[i+1:]...)
			break
		}
	}
	if len(slots) == 0 {
		delete(g.pending, s.src)
	} else {
		g.pending[s.src] = slots
	}
	g.total--
}

// Proven takes s out of the unauthenticated set once its peer has proved the token, before the
// listener answers: a proven handshake is never evicted, so no answer is written on a connection
// that is being closed (and no closed connection is kept as a peer's stream). False when s was
// evicted first: the handshake must fail.
func (g *Guard) Proven(s *Slot) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.evicted {
		return false
	}
	if !s.gone {
		g.removeLocked(s)
		s.gone = true
	}
	return true
}

// Closed says the guard closed s's connection: to make room (Admit logged and counted that
// refusal already) or because the listener is closing (ClosePending; no refusal at all). The
// handshake's failure is then the guard's doing and must not be refused again.
func (g *Guard) Closed(s *Slot) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return s.closed
}

// Done gives back s's slot (nothing, if it was evicted or proven); authenticated says the
// handshake proved the token (its source becomes known).
func (g *Guard) Done(s *Slot, authenticated bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !s.gone {
		g.removeLocked(s)
		s.gone = true
	}
	if authenticated && !g.known[s.src] && len(g.known) < maxSources {
		g.known[s.src] = true
	}
}

// ClosePending closes the connection of every handshake still in progress (each still gets
// its Done): a listener that is closing does not wait for handshakes a silent dialler holds
// open until their deadline.
func (g *Guard) ClosePending() {
	g.mu.Lock()
	var cs []io.Closer
	for _, slots := range g.pending {
		for _, s := range slots {
			s.closed = true
			cs = append(cs, s.c)
		}
	}
	g.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Refuse logs a refusal of a connection from src at warning level, unless src had one logged
// within the period; then it is only counted.
func (g *Guard) Refuse(src, msg string, args ...any) {
	g.mu.Lock()
	key := src
	if g.refused[key] == nil && len(g.refused) >= maxSources {
		key = otherSources
	}
	r := g.refused[key]
	now := g.now()
	var prev int
	var prevSince time.Time
	if r != nil && now.Sub(r.since) < g.every {
		r.suppressed++
		g.mu.Unlock()
		refusalsSuppressed.Add(1)
		return
	}
	if r != nil {
		prev, prevSince = r.suppressed, r.since
	}
	g.refused[key] = &refusals{since: now}
	g.mu.Unlock()
	if prev > 0 {
		g.logSuppressed(key, prev, now.Sub(prevSince))
	}
	refusalsLogged.Add(1)
	g.log.Warn(msg, append([]any{"remote", src}, args...)...)
}

func (g *Guard) logSuppressed(src string, n int, d time.Duration) {
	g.log.Warn(fmt.Sprintf("allreduce: suppressed %d refusals from %s in the last %v", n, src, d.Round(time.Second)),
		"remote", src, "suppressed", n)
}

// flush logs the suppressed counts of the periods that ended (all, with final) and forgets
// their sources.
func (g *Guard) flush(final bool) {
	type line struct {
		src string
		n   int
		d   time.Duration
	}
	var lines []line
	g.mu.Lock()
	now := g.now()
	for src, r := range g.refused {
		if final || now.Sub(r.since) >= g.every {
			if r.suppressed > 0 {
				lines = append(lines, line{src, r.suppressed, now.Sub(r.since)})
			}
			delete(g.refused, src)
		}
	}
	g.mu.Unlock()
	for _, l := range lines {
		g.logSuppressed(l.src, l.n, l.d)
	}
}

// HelloWithin is the deadline for a connection's hello: HelloDeadline, or total if shorter.
func helloWithin(total time.Duration) time.Duration { return min(HelloDeadline, total) }
