package tcpnet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/link"
)

// The raw TCP data plane (link.Config.TransportKind "tcp", or DDP_TRANSPORT=tcp). The rendezvous is
// the gRPC one (package rendezvous: rank 0's Join at MasterAddr, behind the handshake), which also
// collects every rank's data-plane port; rank 0 serves it on a gRPC server with Join alone, and
// the other ranks serve no gRPC. Frames then travel on one plain TCP connection per ordered
// pair of ring neighbours, each message a 4-byte little-endian length and the frame.
//
// Why: on one host the ring is CPU-bound, and gRPC spends CPU per byte beyond the kernel's two
// copies — HTTP/2 framing in 16 KiB DATA frames, each copied out of the read buffer into a
// pooled buffer and handed between goroutines, the codec's copy into a contiguous message, the
// framer's copy into its write buffer (docs/perf-allreduce.md). Here the sender encodes (casts)
// the frame into its own buffer and writes it with one syscall; the receiver reads it with the
// caller's goroutine straight into a buffer the reduction then reads: the kernel's socket
// buffers are the only queue and the flow control.
//
// Every connection starts with the handshake of package auth (both sides prove the token without
// sending it; the dialler names its rank and world), and the accepting rank checks the rank and
// world, answers a status and a reason, and logs a refusal, as the gRPC transport does. Failure semantics
// are the gRPC transport's: a broken or closed connection is a *PeerError (ErrPeerGone) after
// what was already received; a Send whose context ends keeps writing for sendGrace, then the
// link is cut; Close releases every connection and goroutine. TLS is not supported here (use
// the default gRPC transport for TLS).

// Same host: when a peer's data-plane address is a loopback address (so it shares this rank's
// network namespace), the link is a Unix-domain stream socket in Linux's abstract namespace
// (which belongs to the network namespace, like loopback), named after the peer's TCP address,
// with the same handshake; TCP is the fallback when that fails. Unix sockets skip the TCP/IP
// stack: on the 2-core test VM a 1 MiB-write stream carried 5.7–6.7 GB/s against TCP
// loopback's 2.25 (docs/perf-allreduce.md). Kind "tcp-inet" never uses them (for measuring).
// On such a link the shared-memory decorator (package shm) then moves the frames through a ring;
// the socket stays the link (the handshake, the offer's one-byte answer back, the end of the
// link, and frames too large for the ring).

// Transport is one rank's raw-socket data plane: a link.Transport, a link.Aborter (Abort is
// Close: a dying process closes its sockets the same way) and a link.Linker for the
// shared-memory decorator.
type Transport struct {
	cfg link.Config
	log *slog.Logger
	rdv link.Rendezvous // rank 0's serves Join at MasterAddr on a gRPC server of its own
	lis net.Listener
	ux  net.Listener // abstract Unix socket for same-host peers; nil if none
	wg  sync.WaitGroup

	addrs []string // data-plane addresses by rank
	in    []*tcpIn
	out   []*tcpOut
	outMu sync.Mutex

	connsMu sync.Mutex
	conns   map[net.Conn]struct{} // accepted connections (handshaking or serving)
	guard   *auth.Guard           // bounds the handshakes in progress, rate-limits refusals

	closed chan struct{}
	once   sync.Once
}

var (
	_ link.Transport = (*Transport)(nil)
	_ link.Aborter   = (*Transport)(nil)
)

// tcpIn is the connection a peer sends to this rank on; only Recv reads it.
type tcpIn struct {
	mu    sync.Mutex
	conn  net.Conn
	ready chan struct{} // closed once conn is set
	buf   []byte        // the last message, reused
	err   error         // sticky: the link broke or a read was abandoned mid-frame
}

// tcpOut is the connection this rank sends to a peer on.
type tcpOut struct {
	conn net.Conn
	buf  []byte
	err  error
}

// New listens for this rank's data links, joins the rendezvous (newRdv, which on rank 0 serves
// Join on a gRPC server of its own at MasterAddr, the listener's port announced as the data
// port) and returns a transport that knows every rank's data-plane address. cfg has its
// defaults (link.Config.WithDefaults).
func New(ctx context.Context, cfg link.Config, newRdv link.NewRendezvous) (*Transport, error) {
	if cfg.TLS != nil {
		return nil, fmt.Errorf("allreduce: the tcp transport does not support TLS; use the default gRPC transport (DDP_TRANSPORT=%s)", link.TransportGRPC)
	}
	listen, err := cfg.ListenAddress()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("allreduce: listen address %q: %w", listen, err)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank %d: data-plane listen on %s: %w", cfg.Rank, host, err)
	}
	t := &Transport{cfg: cfg, log: cfg.Logger.With("rank", cfg.Rank), lis: lis,
		in: make([]*tcpIn, cfg.WorldSize), out: make([]*tcpOut, cfg.WorldSize),
		conns: map[net.Conn]struct{}{}, guard: auth.NewGuard(cfg.Logger.With("rank", cfg.Rank, "transport", "tcp"), 0), closed: make(chan struct{})}
	for i := range t.in {
		t.in[i] = &tcpIn{ready: make(chan struct{})}
	}
	if cfg.TransportKind == link.TransportTCP && runtime.GOOS == "linux" && link.IsLoopback(host) {
		if ux, err := net.Listen("unix", unixName(lis.Addr().String(), t.cfg.Token)); err == nil {
			t.ux = ux
			t.wg.Add(1)
			go t.accept(ux)
		} else {
			t.log.Debug("allreduce: no Unix-domain data plane", "err", err)
		}
	}
	t.wg.Add(1)
	go t.accept(lis)
	// The rendezvous announces this rank's address (rank 0: MasterAddr) and its data port; the
	// data plane is on the address's host, as rank 0 records it.
	port := lis.Addr().(*net.TCPAddr).Port
	adv := cfg.AdvertiseAddr
	if cfg.Rank == 0 {
		adv = cfg.MasterAddr
	} else if adv == "" {
		adv = lis.Addr().String()
	}
	if t.rdv, err = newRdv(adv, port, true); err != nil {
		t.Close()
		return nil, err
	}
	res, err := t.rdv.Run(ctx)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.addrs = res.Data
	if len(t.addrs) != cfg.WorldSize {
		t.Close()
		return nil, fmt.Errorf("allreduce: rank %d: rendezvous gave no data-plane addresses (DDP_TRANSPORT differs between ranks?)", cfg.Rank)
	}
	return t, nil
}

// unixName is the abstract Unix socket of the rank whose TCP data plane is at addr, in a group
// with this token. The token is in the name, as for the gRPC plane's (GRPCUnixName), so a local
// process without it cannot know the name to take it first; and the handshake (package auth) never
// sends the token, so even one that does learns nothing from the peers that dial it.
func unixName(addr, token string) string {
	h := sha256.Sum256([]byte("goddp-tcp-unix\x00" + token + "\x00" + addr))
	return "@goddp-allreduce-" + hex.EncodeToString(h[:12])
}

func (t *Transport) accept(lis net.Listener) {
	defer t.wg.Done()
	for {
		c, err := lis.Accept()
		if err != nil {
			return // closed
		}
		t.connsMu.Lock()
		select {
		case <-t.closed:
			t.connsMu.Unlock()
			c.Close()
			return
		default:
		}
		src := auth.Source(c)
		slot := t.guard.Admit(src, c)
		if slot == nil {
			t.connsMu.Unlock()
			c.Close()
			continue
		}
		t.conns[c] = struct{}{}
		t.connsMu.Unlock()
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ok := t.handshake(c, src, slot)
			t.guard.Done(slot, ok)
			if !ok {
				t.connsMu.Lock()
				delete(t.conns, c)
				t.connsMu.Unlock()
				c.Close()
			}
		}()
	}
}

// handshake authenticates a connecting peer (package auth); on success the connection becomes that
// peer's inbox.
func (t *Transport) handshake(c net.Conn, src string, slot *auth.Slot) bool {
	remote := c.RemoteAddr().String()
	rank, world, err := auth.Accept(c, t.cfg.Token, auth.PlaneTCP, min(auth.Deadline, t.cfg.Timeout))
	switch {
	case err != nil && t.guard.Closed(slot):
		t.log.Debug("allreduce: data-plane handshake ended: the guard closed its connection (to make room, or the transport is closing)", "remote", remote, "err", err)
		return false // not a refusal of its own: Admit counted the eviction
	case err == nil:
		if !t.guard.Proven(slot) {
			return false // evicted before it proved the token: the connection is being closed
		}
	case errors.Is(err, auth.ErrDialer):
		t.guard.Refuse(src, "allreduce: refused connection with a wrong or missing token", "addr", remote)
		return false
	case errors.Is(err, auth.ErrMagic):
		t.guard.Refuse(src, "allreduce: refused a data-plane connection that is not goddp's", "addr", remote)
		return false
	default:
		t.log.Debug("allreduce: data-plane handshake failed", "remote", remote, "err", err)
		return false
	}
	refuse := func(err error) bool {
		auth.Reply(c, err)
		return false
	}
	if err := auth.CheckPeer(t.cfg, rank, world); err != nil {
		t.guard.Refuse(src, "allreduce: refused connection from a peer of another world", "addr", remote, "claimed_rank", rank, "claimed_world", world)
		return refuse(err)
	}
	in := t.in[rank]
	in.mu.Lock()
	if in.conn != nil {
		in.mu.Unlock()
		t.log.Warn("allreduce: refused a second stream from a peer", "peer", rank, "transport", "tcp")
		return refuse(fmt.Errorf("rank %d already has a stream to rank %d", rank, t.cfg.Rank))
	}
	if auth.Reply(c, nil) != nil {
		in.mu.Unlock()
		return false
	}
	c.SetDeadline(time.Time{})
	in.conn = c
	close(in.ready)
	in.mu.Unlock()
	return true
}

// dial opens the link to a peer and runs the handshake.
func (t *Transport) dial(ctx context.Context, to int) (net.Conn, error) {
	d := net.Dialer{Timeout: t.cfg.Timeout}
	var c net.Conn
	err := errors.New("no Unix-domain socket")
	if host, _, _ := net.SplitHostPort(t.addrs[to]); t.cfg.TransportKind == link.TransportTCP && runtime.GOOS == "linux" && link.IsLoopback(host) {
		c, err = d.DialContext(ctx, "unix", unixName(t.addrs[to], t.cfg.Token))
	}
	if err != nil {
		if c, err = d.DialContext(ctx, "tcp", t.addrs[to]); err != nil {
			return nil, err
		}
	}
	c.SetDeadline(time.Now().Add(min(auth.Deadline, t.cfg.Timeout)))
	if err := auth.DialContext(ctx, c, t.cfg.Token, auth.PlaneTCP, t.cfg.Rank, t.cfg.WorldSize); err != nil {
		c.Close()
		return nil, fmt.Errorf("data-plane handshake: %w", err)
	}
	if uc, ok := c.(*net.UnixConn); ok {
		if t.cfg.TCPUnixSendBuf > 0 {
			uc.SetWriteBuffer(t.cfg.TCPUnixSendBuf) // fewer wake-ups per chunk than the default ~208 KiB
		}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func (t *Transport) link(ctx context.Context, to int) (*tcpOut, error) {
	return link.OpenLink(&t.outMu, t.out, t.closed, to, func() (*tcpOut, bool, error) {
		l := &tcpOut{}
		l.conn, l.err = t.dial(ctx, to)
		if l.err != nil {
			if ctx.Err() != nil {
				// Our own collective was cancelled mid-dial: that says nothing about the peer,
				// so nothing is kept and the next Send (the abort frame that tells the peer why)
				// dials afresh.
				return nil, false, context.Cause(ctx)
			}
			l.err = &link.PeerError{Rank: to, Err: l.err}
		}
		return l, true, nil
	})
}

func (t *Transport) Send(ctx context.Context, to int, p link.Payload) error {
	if to < 0 || to >= len(t.out) || to == t.cfg.Rank {
		return fmt.Errorf("allreduce: send to invalid rank %d", to)
	}
	l, err := t.link(ctx, to)
	if err != nil {
		return err
	}
	n := p.Size()
	if cap(l.buf) < 4+n {
		l.buf = make([]byte, 4+n)
	}
	b := l.buf[:4+n]
	binary.LittleEndian.PutUint32(b, uint32(n))
	p.Encode(b[4:])
	// A Send whose ctx ends while the kernel's buffer is full keeps writing for sendGrace (so a
	// send merely in progress when a collective fails completes and the abort frame can follow),
	// then the write deadline cuts it.
	err = graceful(ctx, l.conn.SetWriteDeadline, func() error { _, err := l.conn.Write(b); return err })
	if err == nil {
		return nil
	}
	return t.sendFailed(ctx, l, to, err)
}

// graceful runs io (a read or a write on a connection) so that when ctx ends it gets sendGrace
// more, then setDeadline cuts it.
func graceful(ctx context.Context, setDeadline func(time.Time) error, io func() error) error {
	var mu sync.Mutex
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		if !done {
			setDeadline(time.Now().Add(link.SendGrace))
		}
		mu.Unlock()
	})
	err := io()
	mu.Lock()
	done = true
	mu.Unlock()
	if !stop() {
		setDeadline(time.Time{})
	}
	return err
}

// sendFailed makes a failed write (or read of an answer) the link's sticky error, and closes
// the connection: nothing is sent on it again, and the peer, which may be waiting for the rest of
// a frame, reads its end at once instead of waiting out its timeout.
func (t *Transport) sendFailed(ctx context.Context, l *tcpOut, to int, err error) error {
	l.conn.Close()
	select {
	case <-t.closed:
		l.err = link.ErrClosed
		return link.ErrClosed
	default:
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
		l.err = &link.PeerError{Rank: to, Err: fmt.Errorf("send abandoned: %w", context.Cause(ctx))}
		return context.Cause(ctx)
	}
	l.err = &link.PeerError{Rank: to, Err: fmt.Errorf("%w: %v", link.ErrPeerGone, err)}
	return l.err
}

func (t *Transport) Recv(ctx context.Context, from int) ([]byte, error) {
	if from < 0 || from >= len(t.in) || from == t.cfg.Rank {
		return nil, fmt.Errorf("allreduce: recv from invalid rank %d", from)
	}
	in := t.in[from]
	select {
	case <-in.ready:
	default:
		select {
		case <-in.ready:
		case <-t.closed:
			return nil, link.ErrClosed
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	if in.err != nil {
		return nil, in.err
	}
	// A blocked read ends when ctx does (a deadline in the past) or when Close closes the conn.
	var mu sync.Mutex
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		if !done {
			in.conn.SetReadDeadline(time.Unix(1, 0))
		}
		mu.Unlock()
	})
	b, err := in.read()
	mu.Lock()
	done = true
	mu.Unlock()
	if !stop() {
		in.conn.SetReadDeadline(time.Time{})
	}
	if err == nil {
		return b, nil
	}
	select {
	case <-t.closed:
		return nil, link.ErrClosed
	default:
	}
	switch {
	case errors.Is(err, errTCPTooLarge):
		in.err = &link.PeerError{Rank: from, Err: fmt.Errorf("malformed frame: %w", err)}
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		// The stream may be mid-frame now: the link is unusable after this.
		in.err = &link.PeerError{Rank: from, Err: fmt.Errorf("receive abandoned: %w", context.Cause(ctx))}
		return nil, context.Cause(ctx)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		in.err = &link.PeerError{Rank: from, Err: link.ErrPeerGone}
	default:
		in.err = &link.PeerError{Rank: from, Err: fmt.Errorf("%w: %v", link.ErrPeerGone, err)}
	}
	return nil, in.err
}

// read reads one length-prefixed message into in.buf.
func (in *tcpIn) read() ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(in.conn, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(l[:]))
	if n > link.MaxMessage {
		return nil, fmt.Errorf("%w: message of %d bytes", errTCPTooLarge, n)
	}
	if cap(in.buf) < n {
		in.buf = make([]byte, n)
	}
	b := in.buf[:n]
	if _, err := io.ReadFull(in.conn, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// Close ends every connection: frames already written reach the peer (the kernel sends what is
// buffered before the FIN), so a rank that leaves right after its last collective does not take
// them with it.
func (t *Transport) Close() error { return t.Abort() }

// Abort is Close (a dying process closes its sockets the same way).
func (t *Transport) Abort() error {
	t.once.Do(func() {
		t.connsMu.Lock()
		close(t.closed)
		t.connsMu.Unlock()
		t.lis.Close()
		if t.ux != nil {
			t.ux.Close()
		}
		t.outMu.Lock()
		for _, l := range t.out {
			if l != nil && l.conn != nil {
				l.conn.Close()
			}
		}
		t.outMu.Unlock()
		t.connsMu.Lock()
		for c := range t.conns {
			c.Close()
		}
		t.connsMu.Unlock()
		t.wg.Wait()
		t.guard.Stop()
		if t.rdv != nil {
			t.rdv.Close()
		}
	})
	return nil
}

var errTCPTooLarge = errors.New("frame too large")

// The shared-memory decorator's needs (package shm).
var _ link.Linker = (*Transport)(nil)

func (t *Transport) LinkTo(ctx context.Context, to int) (bool, error) {
	if to < 0 || to >= len(t.out) || to == t.cfg.Rank {
		return false, fmt.Errorf("allreduce: send to invalid rank %d", to)
	}
	l, err := t.link(ctx, to)
	if err != nil {
		return false, err
	}
	_, local := l.conn.(*net.UnixConn)
	return local, nil
}

func (t *Transport) LinkFromLocal(from int) bool {
	in := t.in[from]
	in.mu.Lock()
	defer in.mu.Unlock()
	_, local := in.conn.(*net.UnixConn)
	return local
}

// answer writes b on the connection the peer sends on: the socket is two-way, and nothing else
// is ever written back on it.
func (t *Transport) Answer(from int, b []byte) error {
	in := t.in[from]
	_, err := in.conn.Write(b)
	return err
}

func (t *Transport) ReadAnswer(ctx context.Context, to int, b []byte) error {
	l, err := t.link(ctx, to)
	if err != nil {
		return err
	}
	err = graceful(ctx, l.conn.SetReadDeadline, func() error { _, err := io.ReadFull(l.conn, b); return err })
	if err != nil {
		return t.sendFailed(ctx, l, to, err)
	}
	return nil
}

func (t *Transport) LinkDown(peer int, out bool) bool {
	if out {
		t.outMu.Lock()
		l := t.out[peer]
		t.outMu.Unlock()
		return l != nil && (l.err != nil || connGone(l.conn))
	}
	in := t.in[peer]
	in.mu.Lock()
	c := in.conn
	in.mu.Unlock()
	return c != nil && connGone(c)
}

// Failed is the link's sticky error (link.OpenLink).
func (l *tcpOut) Failed() error { return l.err }
