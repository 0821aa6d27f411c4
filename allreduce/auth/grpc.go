package auth

// The gRPC side of the handshake, shared by the gRPC data plane (package grpcnet) and the
// rendezvous (package rendezvous): how a connection to a group's gRPC server is dialled and
// authenticated, how the server's interceptors refuse calls on any other, and where a handler
// finds the rank a connection proved.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goddp/goddp/allreduce/link"
)

// Same host: a rank whose gRPC server listens on a loopback address also serves the same
// gRPC service on a Unix-domain stream socket in Linux's abstract namespace (which belongs to
// the network namespace, as loopback does), named after its TCP address and the group's token;
// a rank dialling a loopback peer's data link tries that socket first and falls back to TCP.
// The token is in the name so that a local process without it cannot take the name first
// (abstract names, unlike ports, are free until bound) and collect the token peers present. It is still HTTP/2
// through grpc-go, with the same credentials (TLS runs over the Unix socket as over TCP) and
// the same token check; only the kernel path changes: a Unix stream skips the TCP/IP stack
// (docs/perf-allreduce.md measured 2.25 GB/s for TCP loopback against 5.7–6.7 GB/s for a Unix
// socket on the 2-core VM). link.Config.GRPCNoUnix (DDP_GRPC_UNIX=0) turns it off.

// GRPCUnixName is the abstract Unix socket of the rank whose gRPC server listens at addr, in a
// group with this token.
func GRPCUnixName(addr, token string) string {
	h := sha256.Sum256([]byte("goddp-grpc-unix\x00" + token + "\x00" + addr))
	return "@goddp-grpc-" + hex.EncodeToString(h[:12])
}

// UseUnix says whether loopback peers are reached through Unix sockets.
func UseUnix(cfg link.Config) bool { return runtime.GOOS == "linux" && !cfg.GRPCNoUnix }

// ListenUnix opens the Unix-domain listener beside a loopback TCP listener; nil if the
// TCP address is not loopback or the socket cannot be made (then peers use TCP).
func ListenUnix(tcp net.Listener, cfg link.Config) net.Listener {
	if !UseUnix(cfg) {
		return nil
	}
	host, _, err := net.SplitHostPort(tcp.Addr().String())
	if err != nil || !link.IsLoopback(host) {
		return nil
	}
	ux, err := cfg.ListenGRPC("unix", GRPCUnixName(tcp.Addr().String(), cfg.Token))
	if err != nil {
		return nil
	}
	return ux
}

// DialConn connects to the gRPC server at addr, without the handshake (DialGRPC makes it): a
// peer's Unix socket when its address is loopback and the socket exists, TCP otherwise.
func DialConn(ctx context.Context, addr string, cfg link.Config) (net.Conn, error) {
	if UseUnix(cfg) {
		if host, _, err := net.SplitHostPort(addr); err == nil && link.IsLoopback(host) {
			if c, err := cfg.DialGRPC(ctx, "unix", GRPCUnixName(addr, cfg.Token)); err == nil {
				if uc, ok := c.(*net.UnixConn); ok && cfg.GRPCUnixSendBuf > 0 {
					uc.SetWriteBuffer(cfg.GRPCUnixSendBuf) // fewer wake-ups per message
				}
				return c, nil
			}
		}
	}
	return cfg.DialGRPC(ctx, "tcp", addr)
}

// DialGRPC opens a connection to the gRPC server at addr (a same-host peer's Unix socket
// where there is one) and runs the handshake (auth.go) on it; onConn, if set, sees the raw
// connection first.
func DialGRPC(ctx context.Context, addr string, cfg link.Config, onConn func(net.Conn)) (net.Conn, error) {
	c, err := DialConn(ctx, addr, cfg)
	if err != nil {
		return nil, err
	}
	if onConn != nil {
		onConn(c)
	}
	deadline := time.Now().Add(min(Deadline, cfg.Timeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	if err := DialContext(ctx, c, cfg.Token, PlaneGRPC, cfg.Rank, cfg.WorldSize); err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// Interceptors is a gRPC server's pair of interceptors: a call is served only on a connection
// whose handshake (auth.go) proved the caller's rank, which the handler then finds in its
// context (rankKey) or stream (rankStream); any other call is refused with Unauthenticated, and
// the refusal logged.
func Interceptors(log *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	auth := func(ctx context.Context, method string) (int, error) {
		p, ok := peer.FromContext(ctx)
		if ok {
			if a, ok := p.Addr.(Addr); ok {
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

// Rank is the rank the connection of a unary call proved (the interceptor put it in ctx).
func Rank(ctx context.Context) (int, bool) {
	r, ok := ctx.Value(rankKey{}).(int)
	return r, ok
}

// StreamRank is the rank the connection of a streaming call proved (the interceptor wrapped
// the stream); false for a stream that did not pass the interceptor.
func StreamRank(ss grpc.ServerStream) (int, bool) {
	rs, ok := ss.(*rankStream)
	if !ok {
		return -1, false
	}
	return rs.rank, true
}

type rankStream struct {
	grpc.ServerStream
	rank int
}
