package allreduce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goddp/goddp/allreduce/link"
)

// The gRPC transport. Every rank runs one gRPC server (rank 0's at MasterAddr) with a
// hand-written service (no protobuf generation; raw-bytes codec, codec_raw.go):
//
//	/goddp.allreduce.Ring/Join  unary, rank 0 only: the rendezvous (rendezvous.go).
//	/goddp.allreduce.Ring/Push  client stream: the frames one rank sends another, in order.
//
// A rank sending to a peer opens one Push stream to it, lazily, and keeps it for the group's
// life. Every connection, either way, starts with the handshake of auth.go, which proves the
// token without sending it and tells the server the caller's rank; the server's listener hands
// gRPC only connections that completed it, so nothing unauthenticated is ever decoded, and a
// call on any other connection is refused with Unauthenticated and logged.
//
// Same-host peers are reached over a Unix-domain twin of the server's listener, and the server
// reads plaintext connections through rxConn, which lets gRPC's framer read DATA payloads in
// place (grpc_conn.go; docs/perf-allreduce.md has the measurements).
//
// On a same-host link the shared-memory decorator (shm.go) moves the frames through a ring;
// the Push stream stays the link (its first message the decorator's hello, one answer back,
// its end the link's end, and frames too large for the ring).

const (
	serviceName   = "goddp.allreduce.Ring"
	grpcSockBuf   = 4 << 20 // gRPC's client read buffer per connection, bytes
	inboxDepth    = 4       // frames a receiving link buffers before gRPC flow control holds the sender
	joinRetryBase = 50 * time.Millisecond
)

var ringServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{joinMethod}, // rendezvous.go
	Streams: []grpc.StreamDesc{{
		StreamName:    "Push",
		ClientStreams: true,
		ServerStreams: true, // answers back along the link (shm.go's offer), nothing else
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(*grpcTransport).push(stream)
		},
	}},
}

var pushStreamDesc = grpc.StreamDesc{StreamName: "Push", ClientStreams: true, ServerStreams: true}

type grpcTransport struct {
	cfg  Config
	log  *slog.Logger
	srv  *grpc.Server
	lis  net.Listener
	ux   net.Listener // Unix-domain twin of lis for same-host peers (grpc_conn.go); nil if none
	rx   *rxPool      // the server's receive buffers (grpc_conn.go); nil with TLS
	serv sync.WaitGroup

	ctx    context.Context // cancelled by Close: ends every stream
	cancel context.CancelFunc

	addrs  []string // every rank's data-plane address, after rendezvous
	in     []*inbox
	out    []*outLink
	outMu  sync.Mutex
	closed chan struct{}
	once   sync.Once

	rdv *rendezvous // rendezvous.go; this server hosts rank 0's Join
}

var _ link.Transport = (*grpcTransport)(nil)

// inbox holds the frames received from one peer.
type inbox struct {
	q      chan inItem
	free   chan []byte
	last   inItem
	mu     sync.Mutex
	err    error             // why the link broke
	broken chan struct{}     // closed when err is set
	active bool              // a Push stream from this peer is being served
	ended  bool              // push returned: ss is gone
	ss     grpc.ServerStream // the Push stream, for answers (link.Linker)
	unix   bool              // it came over a Unix-domain socket (a peer on this host)
}

// inItem is a received message, in a buffer of the inbox's.
type inItem struct {
	b []byte
}

func (in *inbox) fail(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err == nil {
		in.err = err
		close(in.broken)
	}
}

// outLink is the Push stream to one peer.
type outLink struct {
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
	err    error
	msg    outMsg

	unix atomic.Bool // the connection is a Unix-domain socket (a peer on this host)
}

// newGRPCTransport starts this rank's server, joins the rendezvous and returns a transport
// that knows every rank's address.
func newGRPCTransport(ctx context.Context, cfg Config) (*grpcTransport, error) {
	t := &grpcTransport{cfg: cfg, log: cfg.Logger.With("rank", cfg.Rank), closed: make(chan struct{}),
		in: make([]*inbox, cfg.WorldSize), out: make([]*outLink, cfg.WorldSize)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for i := range t.in {
		t.in[i] = &inbox{q: make(chan inItem, inboxDepth), free: make(chan []byte, inboxDepth+2), broken: make(chan struct{})}
	}
	listen, err := cfg.ListenAddress()
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank %d: listen on %s: %w", cfg.Rank, listen, err)
	}
	t.lis = lis
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.InitialWindowSize(int32(cfg.GRPCWindow)),
		grpc.InitialConnWindowSize(int32(cfg.GRPCWindow)),
		grpc.WriteBufferSize(max(cfg.GRPCWriteBuf, 0)),
		grpc.MaxRecvMsgSize(link.MaxMessage),
		grpc.MaxSendMsgSize(link.MaxMessage),
		grpc.WaitForHandlers(true),
	}
	unary, stream := grpcAuth(t.log)
	opts = append(opts, grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.TLS == nil && !cfg.GRPCNoRxInPlace {
		// The server reads rxConns unbuffered; they buffer, and DATA payloads are read in place.
		t.rx = &rxPool{slab: cfg.GRPCSlabBytes}
		opts = append(opts, experimental.BufferPool(t.rx), grpc.ReadBufferSize(0))
	} else {
		opts = append(opts, experimental.BufferPool(&framePool{}), grpc.ReadBufferSize(max(cfg.GRPCReadBuf, 0)))
	}
	t.srv = grpc.NewServer(opts...)
	t.srv.RegisterService(&ringServiceDesc, t)
	adv := cfg.AdvertiseAddr
	if cfg.Rank == 0 {
		adv = cfg.MasterAddr
	} else if adv == "" {
		adv = lis.Addr().String()
	}
	t.rdv = newRendezvous(cfg, t.log, adv, 0)
	t.ux = grpcListenUnix(lis, cfg)
	for _, l := range []net.Listener{lis, t.ux} {
		if l == nil {
			continue
		}
		l = newAuthListener(l, cfg, t.log) // auth.go: nothing unauthenticated reaches gRPC
		if t.rx != nil {
			l = rxListener{Listener: l, p: t.rx}
		}
		t.serv.Add(1)
		go func() {
			defer t.serv.Done()
			_ = t.srv.Serve(l)
		}()
	}

	res, err := t.rdv.run(ctx)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.addrs = res.addrs
	t.log.Debug("allreduce: group formed", "addrs", t.addrs)
	return t, nil
}

// serveJoin hosts rank 0's rendezvous on this server (joinHost).
func (t *grpcTransport) serveJoin(ctx context.Context, body []byte) ([]byte, error) {
	return t.rdv.serveJoin(ctx, body)
}

func (t *grpcTransport) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if t.cfg.TLS != nil {
		creds = credentials.NewTLS(t.cfg.TLS)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return grpcAuthDial(ctx, addr, t.cfg, nil) }),
		grpc.WithInitialWindowSize(int32(t.cfg.GRPCWindow)),
		grpc.WithInitialConnWindowSize(int32(t.cfg.GRPCWindow)),
		grpc.WithReadBufferSize(grpcSockBuf),
		grpc.WithWriteBufferSize(max(t.cfg.GRPCWriteBuf, 0)),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(link.MaxMessage), grpc.MaxCallSendMsgSize(link.MaxMessage)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: joinRetryBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
}

// grpcAuthDial opens a connection to the gRPC server at addr (a same-host peer's Unix socket
// where there is one) and runs the handshake (auth.go) on it; onConn, if set, sees the raw
// connection first.
func grpcAuthDial(ctx context.Context, addr string, cfg Config, onConn func(net.Conn)) (net.Conn, error) {
	c, err := grpcDial(ctx, addr, cfg)
	if err != nil {
		return nil, err
	}
	if onConn != nil {
		onConn(c)
	}
	deadline := time.Now().Add(min(authDeadline, cfg.Timeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	if err := authDial(c, cfg.Token, planeGRPC, cfg.Rank, cfg.WorldSize); err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// grpcAuth is a gRPC server's pair of interceptors: a call is served only on a connection
// whose handshake (auth.go) proved the caller's rank, which the handler then finds in its
// context (rankKey) or stream (rankStream); any other call is refused with Unauthenticated, and
// the refusal logged.
func grpcAuth(log *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	auth := func(ctx context.Context, method string) (int, error) {
		p, ok := peer.FromContext(ctx)
		if ok {
			if a, ok := p.Addr.(authAddr); ok {
				return a.rank, nil
			}
		}
		from := "unknown"
		if ok && p.Addr != nil {
			from = p.Addr.String()
		}
		log.Warn("allreduce: refused a call on an unauthenticated connection", "remote", from, "method", method)
		return -1, status.Error(codes.Unauthenticated, "allreduce: unauthenticated connection")
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		rank, err := auth(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(context.WithValue(ctx, rankKey{}, rank), req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		rank, err := auth(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return h(srv, &rankStream{ServerStream: ss, rank: rank})
	}
	return unary, stream
}

type rankKey struct{}

type rankStream struct {
	grpc.ServerStream
	rank int
}

// push serves one peer's Push stream: frames go into that peer's inbox.
func (t *grpcTransport) push(ss grpc.ServerStream) error {
	rs, ok := ss.(*rankStream)
	if !ok {
		return status.Error(codes.Internal, "allreduce: unauthenticated stream")
	}
	from := rs.rank
	in := t.in[from]
	in.mu.Lock()
	if in.active || in.err != nil {
		in.mu.Unlock()
		t.log.Warn("allreduce: refused a second stream from a peer", "peer", from)
		return status.Errorf(codes.AlreadyExists, "allreduce: rank %d already has a stream to rank %d", from, t.cfg.Rank)
	}
	ctx := ss.Context()
	p, ok := peer.FromContext(ctx)
	in.active, in.ss, in.unix = true, ss, ok && p.Addr != nil && p.Addr.Network() == "unix"
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.ended, in.ss = true, nil // no answer after the handler returns
		in.mu.Unlock()
	}()
	for {
		var m inMsg
		select {
		case m.buf = <-in.free:
		default:
		}
		if err := ss.RecvMsg(&m); err != nil {
			in.fail(linkError(err))
			return nil
		}
		select {
		case in.q <- inItem{b: m.buf}:
		case <-ctx.Done():
			in.fail(link.ErrPeerGone)
			return nil
		case <-t.closed:
			return nil
		}
	}
}

// linkError turns a stream error into what a PeerError carries.
func linkError(err error) error {
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Canceled && s.Code() != codes.Unavailable {
		return fmt.Errorf("%w: %s", link.ErrPeerGone, s.Message())
	}
	return link.ErrPeerGone
}

func (t *grpcTransport) Recv(ctx context.Context, from int) ([]byte, error) {
	if from < 0 || from >= len(t.in) || from == t.cfg.Rank {
		return nil, fmt.Errorf("allreduce: recv from invalid rank %d", from)
	}
	in := t.in[from]
	if last := in.last; last.b != nil {
		select {
		case in.free <- last.b:
		default:
		}
	}
	in.last = inItem{}
	it, err := t.recvQueue(ctx, from, in)
	if err != nil {
		return nil, err
	}
	in.last = it
	return it.b, nil
}

// recvQueue takes the next item the push goroutine queued for this peer.
func (t *grpcTransport) recvQueue(ctx context.Context, from int, in *inbox) (inItem, error) {
	select {
	case it := <-in.q:
		return it, nil
	case <-in.broken:
		select {
		case it := <-in.q:
			return it, nil
		default:
			return inItem{}, &link.PeerError{Rank: from, Err: in.err}
		}
	case <-t.closed:
		return inItem{}, link.ErrClosed
	case <-ctx.Done():
		return inItem{}, context.Cause(ctx)
	}
}

func (t *grpcTransport) link(to int) (*outLink, error) {
	return link.OpenLink(&t.outMu, t.out, t.closed, to, func() (*outLink, bool, error) {
		l := &outLink{}
		conn, err := grpc.NewClient("passthrough:///"+t.addrs[to], append(t.dialOptions(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return grpcAuthDial(ctx, addr, t.cfg, func(c net.Conn) {
				_, isUnix := c.(*net.UnixConn)
				l.unix.Store(isUnix)
			})
		}))...)
		if err != nil {
			l.err = &link.PeerError{Rank: to, Err: err}
			return l, true, nil
		}
		l.conn = conn
		sctx, cancel := context.WithCancel(t.ctx)
		l.cancel = cancel
		// WaitForReady: the peer's server is up (it listened before joining) but the connection
		// may still be starting; the collective's watchdog bounds the wait.
		l.stream, err = conn.NewStream(sctx, &pushStreamDesc, "/"+serviceName+"/Push", grpc.WaitForReady(true))
		if err != nil {
			l.err = &link.PeerError{Rank: to, Err: err}
		}
		return l, true, nil
	})
}

func (t *grpcTransport) Send(ctx context.Context, to int, p link.Payload) error {
	if to < 0 || to >= len(t.out) || to == t.cfg.Rank {
		return fmt.Errorf("allreduce: send to invalid rank %d", to)
	}
	l, err := t.link(to)
	if err != nil {
		return err
	}
	return t.graced(ctx, l, to, func() error {
		l.msg.p = p
		err := l.stream.SendMsg(&l.msg)
		l.msg.p = nil
		return err
	})
}

// graced runs op (a SendMsg or RecvMsg on the link's stream, which take no context) so that if
// ctx ends while it waits (for flow control, or for the peer), the stream ends, but only after
// a grace period: a send that is merely in progress when a collective fails completes and the
// link stays usable for the abort frame that follows. A failure is the link's sticky error.
func (t *grpcTransport) graced(ctx context.Context, l *outLink, to int, op func() error) error {
	var (
		mu     sync.Mutex
		done   bool
		killer *time.Timer
		killed bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			killer = time.AfterFunc(link.SendGrace, func() {
				mu.Lock()
				killed = !done
				mu.Unlock()
				if killed {
					l.cancel()
				}
			})
		}
	})
	err := op()
	stop()
	mu.Lock()
	done = true
	if killer != nil {
		killer.Stop()
	}
	wasKilled := killed
	mu.Unlock()
	if wasKilled {
		l.err = &link.PeerError{Rank: to, Err: fmt.Errorf("send abandoned: %w", context.Cause(ctx))}
		return context.Cause(ctx)
	}
	if err != nil {
		// The stream ended; its status says why.
		var rerr error
		if errors.Is(err, errEOF) {
			var resp []byte
			rerr = l.stream.RecvMsg(&resp)
		}
		if rerr == nil {
			rerr = err
		}
		l.err = &link.PeerError{Rank: to, Err: linkError(rerr)}
		select {
		case <-t.closed:
			return link.ErrClosed
		default:
		}
		return l.err
	}
	return nil
}

// Close first flushes: it half-closes every outgoing stream and waits (a few seconds at most)
// until the peer has read everything sent, because SendMsg returns before the bytes are on the
// wire and a rank that leaves right after its last collective must not take them with it.
func (t *grpcTransport) Close() error {
	t.outMu.Lock()
	var wg sync.WaitGroup
	for _, l := range t.out {
		if l == nil || l.stream == nil || l.err != nil {
			continue
		}
		wg.Go(func() {
			if l.stream.CloseSend() != nil {
				return
			}
			done := make(chan struct{})
			go func() {
				var resp []byte
				_ = l.stream.RecvMsg(&resp) // returns once the peer's handler has read to the end
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(min(t.cfg.Timeout, 5*time.Second)):
				l.cancel()
				<-done
			}
		})
	}
	t.outMu.Unlock()
	wg.Wait()
	return t.Abort()
}

// abort closes everything at once, like a process dying (tests use it as a kill).
func (t *grpcTransport) Abort() error {
	t.once.Do(func() {
		close(t.closed)
		t.rdv.close()
		t.cancel()
		t.outMu.Lock()
		for _, l := range t.out {
			if l != nil && l.conn != nil {
				l.conn.Close()
			}
		}
		t.outMu.Unlock()
		t.srv.Stop()
		t.serv.Wait()
	})
	return nil
}

var errEOF = io.EOF

// The shared-memory decorator's needs (shm.go).
var _ link.Linker = (*grpcTransport)(nil)

func (t *grpcTransport) LinkTo(_ context.Context, to int) (bool, error) {
	if to < 0 || to >= len(t.out) || to == t.cfg.Rank {
		return false, fmt.Errorf("allreduce: send to invalid rank %d", to)
	}
	l, err := t.link(to) // returns once the stream is open, so its dialer has run
	if err != nil {
		return false, err
	}
	return l.unix.Load(), nil
}

func (t *grpcTransport) LinkFromLocal(from int) bool {
	in := t.in[from]
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.unix
}

// answer sends b on the peer's Push stream, back to its sender (the stream is bidirectional
// for this only). gRPC allows it beside the push goroutine's RecvMsg, and not once the handler
// has returned, which in.mu rules out.
func (t *grpcTransport) Answer(from int, b []byte) error {
	in := t.in[from]
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ended || in.ss == nil {
		return link.ErrPeerGone
	}
	return in.ss.SendMsg(&b)
}

func (t *grpcTransport) ReadAnswer(ctx context.Context, to int, b []byte) error {
	l, err := t.link(to)
	if err != nil {
		return err
	}
	return t.graced(ctx, l, to, func() error {
		var resp []byte
		if err := l.stream.RecvMsg(&resp); err != nil {
			return err
		}
		if len(resp) != len(b) {
			return fmt.Errorf("an answer of %d bytes, want %d", len(resp), len(b))
		}
		copy(b, resp)
		return nil
	})
}

func (t *grpcTransport) LinkDown(peer int, out bool) bool {
	if !out {
		select {
		case <-t.in[peer].broken:
			return true
		default:
			return false
		}
	}
	t.outMu.Lock()
	l := t.out[peer]
	t.outMu.Unlock()
	if l == nil || l.stream == nil {
		return l != nil
	}
	return l.err != nil || l.stream.Context().Err() != nil || l.conn.GetState() != connectivity.Ready
}

// Failed is the link's sticky error (link.OpenLink).
func (l *outLink) Failed() error { return l.err }
