package allreduce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goddp/goddp/allreduce/grpcnet"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/rendezvous"
	"github.com/goddp/goddp/allreduce/shm"
	"github.com/goddp/goddp/allreduce/tcpnet"
)

// Group is one rank's membership in a process group. Collectives on a Group must be called
// by every rank in the same order with matching arguments; they run one at a time (a mutex
// serialises overlapping calls). Any failure breaks the group: the failing call and every later
// one return the same *CollectiveError, and the other ranks are told (an abort frame travels the
// ring) so their pending collectives fail too, naming the same peer.
type Group struct {
	cfg  Config
	rank int
	size int
	tr   link.Transport
	log  *slog.Logger

	mu     sync.Mutex // held for the whole of each collective
	seq    uint64     // sequence number of the last collective started
	broken error      // first failure; sticky
	closed atomic.Bool

	closeOnce sync.Once
	closeErr  error

	jobs jobQueue // reused by every collective's sender

	// names, when set, are the ranks of a wider world this group's ranks are (a Hierarchy's
	// rings inside and between hosts: names[r] is rank r's global rank, of world ranks): errors
	// and abort frames blame peers by their global rank.
	names []int
	world int

	// Stats, updated atomically.
	bytesSent, bytesRecv atomic.Int64
	collectives          atomic.Int64
	nanos                atomic.Int64
}

// Stats are cumulative counters of a Group.
type Stats struct {
	BytesSent   int64         // frame bytes handed to the transport, headers included
	BytesRecv   int64         // frame bytes received
	Collectives int64         // collectives completed or failed (not counting one-rank no-ops)
	Time        time.Duration // wall time spent inside collectives
}

// CollectiveError is how every collective fails: which collective, its sequence number (the
// "step" counted from 1, the same on every rank), the peer blamed, and why.
type CollectiveError struct {
	Kind string // "all-reduce", "reduce-scatter", "all-gather-segments", "broadcast", "all-gather", "gather-to", "barrier"
	Seq  uint64
	Peer int // rank blamed; -1 when no peer is (e.g. the caller's context was cancelled)
	Err  error
}

func (e *CollectiveError) Error() string {
	if e.Peer < 0 {
		return fmt.Sprintf("allreduce: %s step %d: %v", e.Kind, e.Seq, e.Err)
	}
	return fmt.Sprintf("allreduce: %s step %d: peer rank %d: %v", e.Kind, e.Seq, e.Peer, e.Err)
}

func (e *CollectiveError) Unwrap() error { return e.Err }

// NewGroup joins the group cfg describes. With a gRPC transport (cfg.Transport nil, world > 1)
// it starts this rank's server, registers with rank 0 at cfg.MasterAddr and waits until every
// rank has (cfg.RendezvousTimeout or ctx). A one-rank world needs nothing.
func NewGroup(ctx context.Context, cfg Config) (*Group, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg, rank: cfg.Rank, size: cfg.WorldSize, log: cfg.Logger.With("rank", cfg.Rank)}
	switch {
	case cfg.WorldSize == 1:
	case cfg.Transport != nil:
		g.tr = cfg.Transport
	default:
		if g.tr, err = newTransport(ctx, cfg); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// NewTransport builds the network transport NewGroup builds when cfg.Transport is nil, as
// memberlist builds its NetTransport: the data plane cfg.TransportKind names (grpcnet, or
// tcpnet for the tcp kinds), which takes part in the rendezvous (package rendezvous) as it
// starts, wrapped in the shared-memory decorator (package shm). A Group given it in
// Config.Transport does no rendezvous of its own. A one-rank world needs none.
func NewTransport(ctx context.Context, cfg Config) (link.Transport, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return newTransport(ctx, cfg)
}

func newTransport(ctx context.Context, cfg Config) (link.Transport, error) {
	newRdv := rendezvous.Maker(cfg, cfg.Logger.With("rank", cfg.Rank))
	var tr link.Transport
	var err error
	switch cfg.TransportKind {
	case link.TransportTCP, link.TransportTCPInet:
		tr, err = tcpnet.New(ctx, cfg, newRdv)
	default:
		tr, err = grpcnet.New(ctx, cfg, newRdv)
	}
	if err != nil {
		return nil, err
	}
	return shm.Wrap(tr, cfg), nil // same-host links on shared memory
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the world size.
func (g *Group) Size() int { return g.size }

// Stats returns the cumulative counters.
func (g *Group) Stats() Stats {
	return Stats{
		BytesSent:   g.bytesSent.Load(),
		BytesRecv:   g.bytesRecv.Load(),
		Collectives: g.collectives.Load(),
		Time:        time.Duration(g.nanos.Load()),
	}
}

// Close leaves the group: it closes the transport (a collective in progress fails), waits for
// that collective to return, and releases every connection and goroutine. Idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		idle := g.mu.TryLock()
		if idle {
			g.mu.Unlock()
		}
		if g.tr != nil {
			if a, ok := g.tr.(link.Aborter); ok && !idle {
				// A collective is running (and sending): no graceful flush, it fails now.
				g.closeErr = a.Abort()
			} else {
				g.closeErr = g.tr.Close()
			}
		}
		g.mu.Lock() // wait for an in-flight collective to unwind
		if g.broken == nil {
			g.broken = link.ErrClosed
		}
		if m, ok := g.tr.(link.MemoryReleaser); ok {
			m.ReleaseMemory() // shared memory a collective may have been reading: none runs now
		}
		g.mu.Unlock()
	})
	return g.closeErr
}

// collective is the state of one collective call.
type collective struct {
	g      *Group
	kind   frameKind
	seq    uint64
	start  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
	dog    *time.Timer  // fires after Timeout without progress
	wait   atomic.Int64 // rank the collective is waiting on, blamed when dog fires
	prev   int
	next   int

	senderDone chan error

	// sentSig, when set (a GatherTo rank that keeps nothing), makes the sender count the data
	// frames it has handed to the transport in sent and signal each one (capacity 1), so the
	// receiver can bound what it holds for forwarding (collectives.go).
	sentSig chan struct{}
	sent    atomic.Int64
}

// begin starts a collective: locks the group, checks it is usable, numbers the call and arms
// the watchdog. A nil collective with a nil error means a one-rank world: nothing to do.
func (g *Group) begin(ctx context.Context, kind frameKind) (*collective, error) {
	if g.closed.Load() {
		return nil, link.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("allreduce: %s: %w", kind, err)
	}
	if g.size == 1 {
		return nil, nil
	}
	g.mu.Lock()
	if g.broken != nil {
		err := g.broken
		g.mu.Unlock()
		return nil, err
	}
	g.seq++
	c := &collective{g: g, kind: kind, seq: g.seq, start: time.Now(),
		prev: ringPrev(g.rank, g.size), next: ringNext(g.rank, g.size)}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	c.wait.Store(int64(c.prev))
	timeout := g.cfg.Timeout
	c.dog = time.AfterFunc(timeout, func() {
		c.cancel(&link.PeerError{Rank: int(c.wait.Load()), Err: fmt.Errorf("no progress for %v (timeout)", timeout)})
	})
	return c, nil
}

// progress resets the watchdog.
func (c *collective) progress() { c.dog.Reset(c.g.cfg.Timeout) }

// fail turns err into the collective's error, blaming the peer it names.
func (c *collective) fail(err error) *CollectiveError {
	var ce *CollectiveError
	if errors.As(err, &ce) {
		return ce
	}
	peer := -1
	var pe *link.PeerError
	if errors.As(err, &pe) {
		peer, err = pe.Rank, pe.Err
		if c.g.names != nil && peer >= 0 && peer < c.g.size {
			peer = c.g.names[peer]
		}
	}
	return &CollectiveError{Kind: c.kind.String(), Seq: c.seq, Peer: peer, Err: err}
}

// end finishes a collective: stops the sender and the watchdog; on failure breaks the group
// and tells the next rank (an abort frame) so the failure travels the ring.
func (c *collective) end(err error) error {
	g := c.g
	defer g.mu.Unlock()
	if err == nil && c.senderDone != nil {
		c.wait.Store(int64(c.next))
		err = <-c.senderDone
		c.senderDone = nil
	}
	if err != nil {
		if cause := context.Cause(c.ctx); cause != nil && c.ctx.Err() != nil && !errors.Is(err, cause) {
			// The sender or the watchdog cancelled: their cause is the real error.
			var pe *link.PeerError
			if errors.As(cause, &pe) {
				err = cause
			}
		}
	}
	c.cancel(nil)
	if c.senderDone != nil {
		<-c.senderDone
	}
	c.dog.Stop()
	g.collectives.Add(1)
	g.nanos.Add(int64(time.Since(c.start)))
	if err == nil {
		return nil
	}
	ce := c.fail(err)
	if g.closed.Load() && ce.Peer < 0 {
		ce.Err = link.ErrClosed
	}
	g.broken = ce
	g.log.Error("allreduce: collective failed; group is broken", "kind", ce.Kind, "step", ce.Seq, "peer", ce.Peer, "err", ce.Err)
	if !g.closed.Load() {
		c.sendAbort(ce)
	}
	return ce
}

// sendAbort tells the next rank about the failure, best effort, within a short bound.
func (c *collective) sendAbort(ce *CollectiveError) {
	g := c.g
	reason := ce.Err.Error()
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	h := frameHeader{kind: kindAbort, wire: wireBytes, origin: g.rank, seq: c.seq,
		count: uint64(len(reason)), n: uint32(len(reason)), aux: uint32(ce.Peer + 1)}
	b := make([]byte, frameHeaderSize+len(reason))
	putFrameHeader(b, &h)
	copy(b[frameHeaderSize:], reason)
	ctx, cancel := context.WithTimeout(context.Background(), min(g.cfg.Timeout, 2*time.Second))
	defer cancel()
	if err := g.tr.Send(ctx, c.next, link.Bytes(b)); err != nil {
		g.log.Debug("allreduce: abort not delivered", "to", c.next, "err", err)
	}
}

// nameRanks makes g's errors and abort frames blame peers by their rank in a world of world
// ranks, names[r] being rank r's (Hierarchy's rings). Called before g's first collective.
func (g *Group) nameRanks(names []int, world int) {
	g.names, g.world = names, world
}

// abortWith breaks g with ce, a failure of another group over some of the same ranks (a
// Hierarchy's other ring), and tells the next rank, as a failed collective of g's own does, so
// that ranks waiting on this one in g fail too, naming ce's peer. A group already broken or
// closed is left as it is.
func (g *Group) abortWith(ce *CollectiveError) {
	if g.size == 1 || g.closed.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken != nil {
		return
	}
	g.broken = ce
	c := &collective{g: g, seq: g.seq, next: ringNext(g.rank, g.size)}
	c.sendAbort(ce)
}

// expect is what the receiver checks each frame against.
type expect struct {
	kind   frameKind
	wire   Wire
	op     Op
	count  uint64
	offset uint64
	n      uint32
	aux    uint32
	origin int
}

// recvFrame receives the next data frame from prev, skipping keepalives, and checks it against
// want (origin < 0: not checked; count of ^0: any). It returns the payload.
func (c *collective) recvFrame(want *expect) ([]byte, frameHeader, error) {
	g := c.g
	for {
		b, err := g.tr.Recv(c.ctx, c.prev)
		if err != nil {
			if pe := (*link.PeerError)(nil); !errors.As(err, &pe) && c.ctx.Err() == nil {
				err = &link.PeerError{Rank: c.prev, Err: err}
			}
			return nil, frameHeader{}, err
		}
		g.bytesRecv.Add(int64(len(b)))
		c.progress()
		h, payload, err := decodeFrame(b)
		if err != nil {
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("malformed frame: %w", err)}
		}
		switch {
		case h.kind == kindKeepalive:
			continue
		case h.kind == kindAbort:
			culprit := int(h.aux) - 1
			if culprit < 0 || culprit >= g.size {
				culprit = h.origin
			}
			reason := string(payload)
			if g.names != nil { // the culprit is a global rank; the origin one of this group
				origin := g.names[c.prev]
				if h.origin >= 0 && h.origin < g.size {
					origin = g.names[h.origin]
				}
				if culprit = int(h.aux) - 1; culprit < 0 || culprit >= g.world || culprit == g.names[g.rank] {
					culprit = origin
				}
				return nil, h, &CollectiveError{Kind: c.kind.String(), Seq: c.seq, Peer: culprit,
					Err: fmt.Errorf("reported by rank %d: %s", origin, reason)}
			}
			if culprit == g.rank {
				culprit = h.origin
			}
			return nil, h, &link.PeerError{Rank: culprit, Err: fmt.Errorf("reported by rank %d: %s", h.origin, reason)}
		case h.seq != c.seq || h.kind != want.kind:
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("mismatched collectives: it sent %s step %d, this rank is in %s step %d", h.kind, h.seq, want.kind, c.seq)}
		case h.wire != want.wire || h.op != want.op:
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("mismatched arguments: it uses wire %s op %s, this rank wire %s op %s", h.wire, h.op, want.wire, want.op)}
		case want.count != ^uint64(0) && h.count != want.count:
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("mismatched sizes: it has %d elements, this rank %d", h.count, want.count)}
		case want.origin >= 0 && h.origin != want.origin:
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("out of order: frame of rank %d's data, expected rank %d's", h.origin, want.origin)}
		case want.count != ^uint64(0) && (h.offset != want.offset || h.n != want.n || h.aux != want.aux):
			return nil, h, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("out of order: chunk [%d,+%d) step %d, expected [%d,+%d) step %d", h.offset, h.n, h.aux, want.offset, want.n, want.aux)}
		}
		return payload, h, nil
	}
}

// FailedByPeer says err is a failure another rank caused: a collective that names the peer it
// blames, a broken link to a peer (*link.PeerError), or a rendezvous whose master was lost
// (link.ErrMasterLost). ddptrain exits with a code of its own for them, which the launcher reads
// as a follow-on of another rank's failure.
func FailedByPeer(err error) bool {
	if ce := (*CollectiveError)(nil); errors.As(err, &ce) && ce.Peer >= 0 {
		return true
	}
	var pe *link.PeerError
	return errors.As(err, &pe) || errors.Is(err, link.ErrMasterLost)
}
