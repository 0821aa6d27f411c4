package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/link"
)

// The rendezvous: how the ranks of a group learn each other's addresses. Rank 0 serves one
// gRPC method at MasterAddr,
//
//	/goddp.allreduce.Ring/Join  unary: "I am rank r of n, reach me at addr (and data port p)";
//	                            answered, once all n have joined, with every rank's address.
//
// and every other rank calls it once. The connection starts with the handshake of package auth like
// every other, so only a rank that proves the token is heard, and the rank it proved is the only
// one it may join as. The table of who joined is table (table.go), a core with no
// I/O; this file is its I/O: the handler, the wait, the client call.
//
// Who serves Join: the gRPC data plane's server, which listens at MasterAddr on rank 0 anyway
// (package grpcnet registers Join beside Push); for the tcp kind, whose frames never touch
// gRPC, a gRPC server of its own on rank 0 with Join alone (joinServer). Ranks above 0 of the
// tcp kind serve no gRPC at all.

// rendezvous is one rank's side of it.
type rendezvous struct {
	cfg  link.Config
	log  *slog.Logger
	self joinRequest // what this rank announces

	// rank 0
	mu     sync.Mutex
	tab    *table
	allIn  chan struct{} // closed when tab is complete
	closed chan struct{} // closed by close: pending Join handlers return
	once   sync.Once
	js     *joinServer // rank 0's own Join server (New's serve)
}

var _ link.Rendezvous = (*rendezvous)(nil)

// New prepares this rank's side of the rendezvous: it will announce addr (rank 0: MasterAddr)
// and, for a plane whose frames do not travel on its gRPC server, dataPort (0 otherwise). With
// serve, rank 0 starts a gRPC server at MasterAddr that serves Join alone (joinServer).
func New(cfg link.Config, log *slog.Logger, addr string, dataPort int, serve bool) (link.Rendezvous, error) {
	r := &rendezvous{cfg: cfg, log: log, closed: make(chan struct{}),
		self: joinRequest{Rank: cfg.Rank, World: cfg.WorldSize, Addr: addr, DataPort: dataPort}}
	if cfg.Rank == 0 {
		r.tab = newTable(cfg.WorldSize, addr, dataPort)
		r.allIn = make(chan struct{})
		if r.tab.complete() {
			close(r.allIn)
		}
		if serve {
			js, err := newJoinServer(r)
			if err != nil {
				return nil, err
			}
			r.js = js
		}
	}
	return r, nil
}

// Maker is New as a link.NewRendezvous for cfg: what the core hands a data plane.
func Maker(cfg link.Config, log *slog.Logger) link.NewRendezvous {
	return func(addr string, dataPort int, serve bool) (link.Rendezvous, error) {
		return New(cfg, log, addr, dataPort, serve)
	}
}

// Close ends the Join handlers still waiting and rank 0's own Join server; idempotent.
func (r *rendezvous) Close() {
	r.once.Do(func() {
		close(r.closed)
		if r.js != nil {
			r.js.stop()
		}
	})
}

// Run takes part in the rendezvous within link.Config.RendezvousTimeout: rank 0 waits until every
// rank has joined (its server must be serving Join), the others call Join.
func (r *rendezvous) Run(ctx context.Context) (link.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RendezvousTimeout)
	defer cancel()
	if r.cfg.Rank == 0 {
		select {
		case <-r.allIn:
		case <-ctx.Done():
			r.mu.Lock()
			missing := r.tab.missing()
			r.mu.Unlock()
			return link.Table{}, fmt.Errorf("allreduce: rendezvous at %s: ranks %v did not join: %w", r.cfg.MasterAddr, missing, ctx.Err())
		case <-r.closed:
			return link.Table{}, link.ErrClosed
		}
		r.mu.Lock()
		a := r.tab.answer()
		r.mu.Unlock()
		return link.Table{Addrs: a.Addrs, Data: a.Data}, nil
	}
	return r.join(ctx)
}

// masterLost is a failed Join call: errors.Is(err, link.ErrMasterLost), with the call's text.
type masterLost struct{ error }

func (e masterLost) Unwrap() error        { return e.error }
func (e masterLost) Is(target error) bool { return target == link.ErrMasterLost }

// join is a rank above 0 calling rank 0's Join.
func (r *rendezvous) join(ctx context.Context) (link.Table, error) {
	n, master := r.cfg.WorldSize, r.cfg.MasterAddr
	req, _ := json.Marshal(r.self)
	conn, err := grpc.NewClient(master, rdvDialOptions(r.cfg)...)
	if err != nil {
		return link.Table{}, fmt.Errorf("allreduce: rendezvous at %s: %w", master, err)
	}
	defer conn.Close()
	var resp []byte
	err = conn.Invoke(ctx, "/"+link.ServiceName+"/Join", &req, &resp, grpc.WaitForReady(true))
	if err != nil {
		return link.Table{}, masterLost{fmt.Errorf("allreduce: rank %d: rendezvous at %s (MASTER_ADDR:MASTER_PORT): %w", r.cfg.Rank, master, err)}
	}
	var jr joinResponse
	if err := json.Unmarshal(resp, &jr); err != nil || len(jr.Addrs) != n {
		return link.Table{}, fmt.Errorf("allreduce: rank %d: bad rendezvous answer from %s", r.cfg.Rank, master)
	}
	if r.self.DataPort > 0 && len(jr.Data) != n {
		return link.Table{}, fmt.Errorf("allreduce: rank %d: rendezvous answer from %s has no data-plane addresses (DDP_TRANSPORT differs between ranks?)", r.cfg.Rank, master)
	}
	return link.Table{Addrs: jr.Addrs, Data: jr.Data}, nil
}

// ServeJoin is rank 0's Join handler: it records the caller, whose rank the connection's
// handshake proved (rankKey, set by the auth interceptor), and answers once everyone is in.
func (r *rendezvous) ServeJoin(ctx context.Context, body []byte) ([]byte, error) {
	if r.tab == nil {
		return nil, status.Error(codes.FailedPrecondition, "allreduce: join sent to a rank other than 0")
	}
	from, ok := auth.Rank(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "allreduce: unauthenticated connection")
	}
	var req joinRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "allreduce: bad join request: %v", err)
	}
	seen := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() != "unix" {
		if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			seen = h
		}
	}
	r.mu.Lock()
	addr, err := r.tab.join(from, req, seen)
	if err == nil && r.tab.complete() {
		select {
		case <-r.allIn:
		default:
			close(r.allIn)
		}
	}
	r.mu.Unlock()
	if err != nil {
		code := codes.InvalidArgument
		switch {
		case errors.Is(err, errJoinTwice):
			code = codes.AlreadyExists
		case errors.Is(err, errJoinKind):
			code = codes.FailedPrecondition
		}
		r.log.Warn("allreduce: refused a join", "joining", req.Rank, "connection_rank", from, "addr", req.Addr, "err", err)
		return nil, status.Error(code, err.Error())
	}
	r.log.Debug("allreduce: rank joined", "joining", req.Rank, "addr", addr)
	select {
	case <-r.allIn:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-r.closed:
		return nil, status.Error(codes.Unavailable, "allreduce: rank 0 closed")
	}
	r.mu.Lock()
	b, _ := json.Marshal(r.tab.answer())
	r.mu.Unlock()
	return b, nil
}

// joinMethod is the Ring service's Join method.
var joinMethod = grpc.MethodDesc{
	MethodName: "Join",
	Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		var req []byte
		if err := dec(&req); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			resp, err := srv.(link.Rendezvous).ServeJoin(ctx, *req.(*[]byte))
			if err != nil {
				return nil, err
			}
			return &resp, nil
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + link.ServiceName + "/Join"}
		return icpt(ctx, &req, info, h) // the server always has the auth interceptor
	},
}

// joinOnlyDesc is the Ring service with Join alone (joinServer).
var joinOnlyDesc = grpc.ServiceDesc{
	ServiceName: link.ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{joinMethod},
}

const (
	rdvMaxMsg = 16 << 20              // a join request or answer: the addresses of a world of 2^15 ranks fit
	retryBase = 50 * time.Millisecond // the client's first wait before it dials rank 0 again
)

// bytesCodec is the rendezvous's gRPC codec: messages are bytes, no protobuf. It bears the
// name of the gRPC data plane's codec (grpcnet's rawCodec), which also serves Join, so both
// servers see the same content subtype on the wire.
type bytesCodec struct{}

func (bytesCodec) Name() string { return "goddp-raw" }

func (bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("allreduce: rendezvous codec cannot marshal %T", v)
}

func (bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*[]byte); ok {
		*m = data.Materialize()
		return nil
	}
	return fmt.Errorf("allreduce: rendezvous codec cannot unmarshal into %T", v)
}

// joinServer is rank 0's rendezvous server for the tcp kind: gRPC at MasterAddr with Join only,
// behind the handshake.
type joinServer struct {
	srv *grpc.Server
	wg  sync.WaitGroup
}

func newJoinServer(r *rendezvous) (*joinServer, error) {
	lis, err := r.cfg.ListenGRPC("tcp", r.cfg.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank 0: rendezvous listen on %s: %w", r.cfg.MasterAddr, err)
	}
	unary, _ := auth.Interceptors(r.log)
	s := &joinServer{srv: grpc.NewServer(grpc.ForceServerCodecV2(bytesCodec{}), grpc.UnaryInterceptor(unary),
		grpc.MaxRecvMsgSize(rdvMaxMsg), grpc.MaxSendMsgSize(rdvMaxMsg), grpc.WaitForHandlers(true))}
	s.srv.RegisterService(&joinOnlyDesc, r)
	l := auth.NewListener(lis, r.cfg, r.log) // package auth: nothing unauthenticated reaches gRPC
	s.wg.Go(func() { _ = s.srv.Serve(l) })
	return s, nil
}

// stop ends the server and its connections.
func (s *joinServer) stop() {
	s.srv.Stop()
	s.wg.Wait()
}

// rdvDialOptions are the rendezvous client's: the handshake on each connection (DialGRPC),
// TLS where configured, the raw codec, and quick retries while rank 0 comes up.
func rdvDialOptions(cfg link.Config) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return auth.DialGRPC(ctx, addr, cfg, nil)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(bytesCodec{}), grpc.MaxCallRecvMsgSize(rdvMaxMsg), grpc.MaxCallSendMsgSize(rdvMaxMsg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: retryBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
}
