package auth

import (
	"fmt"
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
//     ranks, or a host whose ranks joined) may use KnownReserve slots beyond MaxPending, so a
//     flood from many hosts delays its later connections (data links, re-dials) no more than
//     one from a single host does.
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
	pending map[string]int       // handshakes in progress by source
	known   map[string]bool      // sources that authenticated
	refused map[string]*refusals // refusals logged in the current period, by source

	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
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
	g := &Guard{log: log, every: every, now: time.Now, pending: map[string]int{}, known: map[string]bool{},
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

// Admit takes a slot for an unauthenticated connection from src; false (and the refusal
// logged) when its source or the listener is at its bound. Each true must be followed by one
// Done.
func (g *Guard) Admit(src string) bool {
	g.mu.Lock()
	limit := MaxPending
	if g.known[src] {
		limit += KnownReserve
	}
	ok := g.pending[src] < MaxPendingPerSource && g.total < limit
	if ok {
		g.pending[src]++
		g.total++
	}
	g.mu.Unlock()
	if !ok {
		g.Refuse(src, "allreduce: too many connections authenticating at once; closed one")
	}
	return ok
}

// Done gives back src's slot; authenticated says the handshake proved the token (src becomes
// known).
func (g *Guard) Done(src string, authenticated bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.pending[src]--; g.pending[src] <= 0 {
		delete(g.pending, src)
	}
	if authenticated && !g.known[src] && len(g.known) < maxSources {
		g.known[src] = true
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
