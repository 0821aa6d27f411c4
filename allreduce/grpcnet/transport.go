package grpcnet

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

	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/link"
)

// The gRPC transport. Every rank runs one gRPC server (rank 0's at MasterAddr) with a
// hand-written service (no protobuf generation; raw-bytes codec, codec.go):
//
//	/goddp.allreduce.Ring/Join  unary, rank 0 only: the rendezvous (package rendezvous, through link.Rendezvous).
//	/goddp.allreduce.Ring/Push  client stream: the frames one rank sends another, in order.
//
// A rank sending to a peer opens one Push stream to it, lazily, and keeps it for the group's
// life. Every connection, either way, starts with the handshake of package auth, which proves the
// token without sending it and tells the server the caller's rank; the server's listener hands
// gRPC only connections that completed it, so nothing unauthenticated is ever decoded, and a
// call on any other connection is refused with Unauthenticated and logged.
//
// Same-host peers are reached over a Unix-domain twin of the server's listener, and the server
// reads plaintext connections through rxConn, which lets gRPC's framer read DATA payloads in
// place (conn.go; docs/perf-allreduce.md has the measurements).
//
// On a same-host link the shared-memory decorator (package shm) moves the frames through a ring;
// the Push stream stays the link (its first message the decorator's hello, one answer back,
// its end the link's end, and frames too large for the ring).

const (
	grpcSockBuf   = 4 << 20 // gRPC's client read buffer per connection, bytes
	inboxDepth    = 4       // frames a receiving link buffers before gRPC flow control holds the sender
	joinRetryBase = 50 * time.Millisecond
)

var ringServiceDesc = grpc.ServiceDesc{
	ServiceName: link.ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{joinMethod}, // rank 0's rendezvous
	Streams: []grpc.StreamDesc{{
		StreamName:    "Push",
		ClientStreams: true,
		ServerStreams: true, // answers back along the link (package shm's offer), nothing else
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(*Transport).push(stream)
		},
	}},
}

var pushStreamDesc = grpc.StreamDesc{StreamName: "Push", ClientStreams: true, ServerStreams: true}

// Transport is one rank's gRPC data plane: a link.Transport, a link.Aborter (Abort ends it
// without the flush Close makes) and a link.Linker for the shared-memory decorator.
type Transport struct {
	cfg  link.Config
	log  *slog.Logger
	srv  *grpc.Server
	lis  net.Listener
	ux   net.Listener // Unix-domain twin of lis for same-host peers (auth.ListenUnix); nil if none
	rx   *rxPool      // the server's receive buffers (conn.go); nil with TLS
	serv sync.WaitGroup

	ctx    context.Context // cancelled by Close: ends every stream
	cancel context.CancelFunc

	addrs  []string // every rank's data-plane address, after rendezvous
	in     []*inbox
	out    []*outLink
	outMu  sync.Mutex
	closed chan struct{}
	once   sync.Once

	rdv link.Rendezvous // this server hosts rank 0's Join (joinMethod)
}

var (
	_ link.Transport = (*Transport)(nil)
	_ link.Aborter   = (*Transport)(nil)
)

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

// New starts this rank's server, joins the rendezvous (newRdv: this server hosts rank 0's
// Join) and returns a transport that knows every rank's address. cfg has its defaults
// (link.Config.WithDefaults).
func New(ctx context.Context, cfg link.Config, newRdv link.NewRendezvous) (*Transport, error) {
	t := &Transport{cfg: cfg, log: cfg.Logger.With("rank", cfg.Rank), closed: make(chan struct{}),
		in: make([]*inbox, cfg.WorldSize), out: make([]*outLink, cfg.WorldSize)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for i := range t.in {
		t.in[i] = &inbox{q: make(chan inItem, inboxDepth), free: make(chan []byte, inboxDepth+2), broken: make(chan struct{})}
	}
	listen, err := cfg.ListenAddress()
	if err != nil {
		return nil, err
	}
	lis, err := cfg.ListenGRPC("tcp", listen)
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
	unary, stream := auth.Interceptors(t.log)
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
	if t.rdv, err = newRdv(adv, 0, false); err != nil {
		lis.Close()
		return nil, err
	}
	t.ux = auth.ListenUnix(lis, cfg)
	for _, l := range []net.Listener{lis, t.ux} {
		if l == nil {
			continue
		}
		l = auth.NewListener(l, cfg, t.log) // package auth: nothing unauthenticated reaches gRPC
		if t.rx != nil {
			l = rxListener{Listener: l, p: t.rx}
		}
		t.serv.Add(1)
		go func() {
			defer t.serv.Done()
			_ = t.srv.Serve(l)
		}()
	}

	res, err := t.rdv.Run(ctx)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.addrs = res.Addrs
	t.log.Debug("allreduce: group formed", "addrs", t.addrs)
	return t, nil
}

// joinMethod is the Ring service's Join: rank 0's rendezvous (link.Rendezvous.ServeJoin) on
// this server, behind the auth interceptor like Push.
var joinMethod = grpc.MethodDesc{
	MethodName: "Join",
	Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		var req []byte
		if err := dec(&req); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			resp, err := srv.(*Transport).rdv.ServeJoin(ctx, *req.(*[]byte))
			if err != nil {
				return nil, err
			}
			return &resp, nil
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + link.ServiceName + "/Join"}
		return icpt(ctx, &req, info, h) // the server always has the auth interceptor
	},
}

func (t *Transport) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if t.cfg.TLS != nil {
		creds = credentials.NewTLS(t.cfg.TLS)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return auth.DialGRPC(ctx, addr, t.cfg, nil) }),
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

// push serves one peer's Push stream: frames go into that peer's inbox.
func (t *Transport) push(ss grpc.ServerStream) error {
	from, ok := auth.StreamRank(ss)
	if !ok {
		return status.Error(codes.Internal, "allreduce: unauthenticated stream")
	}
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

func (t *Transport) Recv(ctx context.Context, from int) ([]byte, error) {
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
func (t *Transport) recvQueue(ctx context.Context, from int, in *inbox) (inItem, error) {
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

func (t *Transport) link(ctx context.Context, to int) (*outLink, error) {
	return link.OpenLink(&t.outMu, t.out, t.closed, to, func() (*outLink, bool, error) {
		l := &outLink{}
		conn, err := grpc.NewClient("passthrough:///"+t.addrs[to], append(t.dialOptions(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return auth.DialGRPC(ctx, addr, t.cfg, func(c net.Conn) {
				_, isUnix := c.(*net.UnixConn)
				l.unix.Store(isUnix)
			})
		}))...)
		if err != nil {
			l.err = &link.PeerError{Rank: to, Err: err}
			return l, true, nil
		}
		sctx, cancel := context.WithCancel(t.ctx)
		// WaitForReady: the peer's server is up (it listened before joining) but the connection
		// may still be starting. The stream lives as long as the transport (sctx), but the wait
		// for it is the caller's: when ctx ends first (a dead peer never answers; issue 30: an
		// abort frame to it held a failed rank past SIGTERM), the link is not kept and the next
		// Send dials afresh.
		stop := context.AfterFunc(ctx, cancel)
		l.stream, err = conn.NewStream(sctx, &pushStreamDesc, "/"+link.ServiceName+"/Push", grpc.WaitForReady(true))
		if !stop() && t.ctx.Err() == nil {
			cancel()
			conn.Close()
			return nil, false, &link.PeerError{Rank: to, Err: fmt.Errorf("opening the link: %w", context.Cause(ctx))}
		}
		l.conn, l.cancel = conn, cancel
		if err != nil {
			l.err = &link.PeerError{Rank: to, Err: err}
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
func (t *Transport) graced(ctx context.Context, l *outLink, to int, op func() error) error {
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
func (t *Transport) Close() error {
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
func (t *Transport) Abort() error {
	t.once.Do(func() {
		close(t.closed)
		t.rdv.Close()
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

// The shared-memory decorator's needs (package shm).
var _ link.Linker = (*Transport)(nil)

func (t *Transport) LinkTo(ctx context.Context, to int) (bool, error) {
	if to < 0 || to >= len(t.out) || to == t.cfg.Rank {
		return false, fmt.Errorf("allreduce: send to invalid rank %d", to)
	}
	l, err := t.link(ctx, to) // returns once the stream is open, so its dialer has run
	if err != nil {
		return false, err
	}
	return l.unix.Load(), nil
}

func (t *Transport) LinkFromLocal(from int) bool {
	in := t.in[from]
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.unix
}

// answer sends b on the peer's Push stream, back to its sender (the stream is bidirectional
// for this only). gRPC allows it beside the push goroutine's RecvMsg, and not once the handler
// has returned, which in.mu rules out.
func (t *Transport) Answer(from int, b []byte) error {
	in := t.in[from]
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ended || in.ss == nil {
		return link.ErrPeerGone
	}
	return in.ss.SendMsg(&b)
}

func (t *Transport) ReadAnswer(ctx context.Context, to int, b []byte) error {
	l, err := t.link(ctx, to)
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

func (t *Transport) LinkDown(peer int, out bool) bool {
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
