package allreduce

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
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goddp/goddp/allreduce/link"
)

// The rendezvous: how the ranks of a group learn each other's addresses. Rank 0 serves one
// gRPC method at MasterAddr,
//
//	/goddp.allreduce.Ring/Join  unary: "I am rank r of n, reach me at addr (and data port p)";
//	                            answered, once all n have joined, with every rank's address.
//
// and every other rank calls it once. The connection starts with the handshake of auth.go like
// every other, so only a rank that proves the token is heard, and the rank it proved is the only
// one it may join as. The table of who joined is rdvTable (rendezvous_state.go), a core with no
// I/O; this file is its I/O: the handler, the wait, the client call.
//
// Who serves Join: the gRPC data plane's server, which listens at MasterAddr on rank 0 anyway
// (transport_grpc.go registers Join beside Push); for the tcp kind, whose frames never touch
// gRPC, a gRPC server of its own on rank 0 with Join alone (joinServer). Ranks above 0 of the
// tcp kind serve no gRPC at all.

// rendezvous is one rank's side of it.
type rendezvous struct {
	cfg  Config
	log  *slog.Logger
	self joinRequest // what this rank announces

	// rank 0
	mu     sync.Mutex
	tab    *rdvTable
	allIn  chan struct{} // closed when tab is complete
	closed chan struct{} // closed by close: pending Join handlers return
	once   sync.Once
}

// rdvResult is what the rendezvous tells a rank: every rank's address and, for the tcp kind,
// every rank's data-plane address.
type rdvResult struct {
	addrs, data []string
}

// newRendezvous prepares this rank's side: it will announce addr (rank 0: MasterAddr) and, for
// the tcp kind, dataPort (0 for grpc).
func newRendezvous(cfg Config, log *slog.Logger, addr string, dataPort int) *rendezvous {
	r := &rendezvous{cfg: cfg, log: log, closed: make(chan struct{}),
		self: joinRequest{Rank: cfg.Rank, World: cfg.WorldSize, Addr: addr, DataPort: dataPort}}
	if cfg.Rank == 0 {
		r.tab = newRdvTable(cfg.WorldSize, addr, dataPort)
		r.allIn = make(chan struct{})
		if r.tab.complete() {
			close(r.allIn)
		}
	}
	return r
}

// close ends the Join handlers still waiting (rank 0); idempotent.
func (r *rendezvous) close() { r.once.Do(func() { close(r.closed) }) }

// run takes part in the rendezvous within Config.RendezvousTimeout: rank 0 waits until every
// rank has joined (its server must be serving Join), the others call Join.
func (r *rendezvous) run(ctx context.Context) (rdvResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RendezvousTimeout)
	defer cancel()
	if r.cfg.Rank == 0 {
		select {
		case <-r.allIn:
		case <-ctx.Done():
			r.mu.Lock()
			missing := r.tab.missing()
			r.mu.Unlock()
			return rdvResult{}, fmt.Errorf("allreduce: rendezvous at %s: ranks %v did not join: %w", r.cfg.MasterAddr, missing, ctx.Err())
		case <-r.closed:
			return rdvResult{}, link.ErrClosed
		}
		r.mu.Lock()
		a := r.tab.answer()
		r.mu.Unlock()
		return rdvResult{addrs: a.Addrs, data: a.Data}, nil
	}
	return r.join(ctx)
}

// join is a rank above 0 calling rank 0's Join.
func (r *rendezvous) join(ctx context.Context) (rdvResult, error) {
	n, master := r.cfg.WorldSize, r.cfg.MasterAddr
	req, _ := json.Marshal(r.self)
	conn, err := grpc.NewClient(master, rdvDialOptions(r.cfg)...)
	if err != nil {
		return rdvResult{}, fmt.Errorf("allreduce: rendezvous at %s: %w", master, err)
	}
	defer conn.Close()
	var resp []byte
	err = conn.Invoke(ctx, "/"+serviceName+"/Join", &req, &resp, grpc.WaitForReady(true))
	if err != nil {
		return rdvResult{}, fmt.Errorf("allreduce: rank %d: rendezvous at %s (MASTER_ADDR:MASTER_PORT): %w", r.cfg.Rank, master, err)
	}
	var jr joinResponse
	if err := json.Unmarshal(resp, &jr); err != nil || len(jr.Addrs) != n {
		return rdvResult{}, fmt.Errorf("allreduce: rank %d: bad rendezvous answer from %s", r.cfg.Rank, master)
	}
	if r.self.DataPort > 0 && len(jr.Data) != n {
		return rdvResult{}, fmt.Errorf("allreduce: rank %d: rendezvous answer from %s has no data-plane addresses (%s differs between ranks?)", r.cfg.Rank, master, EnvTransport)
	}
	return rdvResult{addrs: jr.Addrs, data: jr.Data}, nil
}

// serveJoin is rank 0's Join handler: it records the caller, whose rank the connection's
// handshake proved (rankKey, set by the auth interceptor), and answers once everyone is in.
func (r *rendezvous) serveJoin(ctx context.Context, body []byte) ([]byte, error) {
	if r.tab == nil {
		return nil, status.Error(codes.FailedPrecondition, "allreduce: join sent to a rank other than 0")
	}
	from, ok := ctx.Value(rankKey{}).(int)
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

// joinHost is what serves Join: the rendezvous itself (joinServer) or the gRPC data plane.
type joinHost interface {
	serveJoin(ctx context.Context, body []byte) ([]byte, error)
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
			resp, err := srv.(joinHost).serveJoin(ctx, *req.(*[]byte))
			if err != nil {
				return nil, err
			}
			return &resp, nil
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/Join"}
		return icpt(ctx, &req, info, h) // the server always has the auth interceptor
	},
}

// joinOnlyDesc is the Ring service with Join alone (joinServer).
var joinOnlyDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{joinMethod},
}

const rdvMaxMsg = 16 << 20 // a join request or answer: the addresses of a world of 2^15 ranks fit

// joinServer is rank 0's rendezvous server for the tcp kind: gRPC at MasterAddr with Join only,
// behind the handshake.
type joinServer struct {
	srv *grpc.Server
	wg  sync.WaitGroup
}

func newJoinServer(r *rendezvous) (*joinServer, error) {
	lis, err := net.Listen("tcp", r.cfg.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank 0: rendezvous listen on %s: %w", r.cfg.MasterAddr, err)
	}
	unary, _ := grpcAuth(r.log)
	s := &joinServer{srv: grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnaryInterceptor(unary),
		grpc.MaxRecvMsgSize(rdvMaxMsg), grpc.MaxSendMsgSize(rdvMaxMsg), grpc.WaitForHandlers(true))}
	s.srv.RegisterService(&joinOnlyDesc, r)
	l := newAuthListener(lis, r.cfg, r.log) // auth.go: nothing unauthenticated reaches gRPC
	s.wg.Go(func() { _ = s.srv.Serve(l) })
	return s, nil
}

// stop ends the server and its connections.
func (s *joinServer) stop() {
	s.srv.Stop()
	s.wg.Wait()
}

// rdvDialOptions are the rendezvous client's: the handshake on each connection (grpcAuthDial),
// TLS where configured, the raw codec, and quick retries while rank 0 comes up.
func rdvDialOptions(cfg Config) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return grpcAuthDial(ctx, addr, cfg, nil)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(rdvMaxMsg), grpc.MaxCallSendMsgSize(rdvMaxMsg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: joinRetryBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
}
