package allreduce

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"

	"google.golang.org/grpc/mem"
)

// Connections and buffers of the gRPC data plane (transport_grpc.go).
//
// Same host: a rank whose gRPC server listens on a loopback address also serves the same
// gRPC service on a Unix-domain stream socket in Linux's abstract namespace (which belongs to
// the network namespace, as loopback does), named after its TCP address; a rank dialling a
// loopback peer's data link tries that socket first and falls back to TCP. It is still HTTP/2
// through grpc-go, with the same credentials (TLS runs over the Unix socket as over TCP) and
// the same token check; only the kernel path changes: a Unix stream skips the TCP/IP stack
// (docs/perf-allreduce.md measured 2.25 GB/s for TCP loopback against 5.7–6.7 GB/s for a Unix
// socket on the 2-core VM). DDP_GRPC_UNIX=0 turns it off.

// grpcUnixName is the abstract Unix socket of the rank whose gRPC server listens at addr.
func grpcUnixName(addr string) string { return "@goddp-grpc-" + addr }

// grpcUseUnix says whether loopback peers are reached through Unix sockets (DDP_GRPC_UNIX).
var grpcUseUnix = runtime.GOOS == "linux" && os.Getenv("DDP_GRPC_UNIX") != "0"

// grpcEnvInt reads a developer knob of the gRPC data plane (bytes); def when unset or bad.
func grpcEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

// grpcListenUnix opens the Unix-domain listener beside a loopback TCP listener; nil if the
// TCP address is not loopback or the socket cannot be made (then peers use TCP).
func grpcListenUnix(tcp net.Listener) net.Listener {
	if !grpcUseUnix {
		return nil
	}
	host, _, err := net.SplitHostPort(tcp.Addr().String())
	if err != nil || !isLoopback(host) {
		return nil
	}
	ux, err := net.Listen("unix", grpcUnixName(tcp.Addr().String()))
	if err != nil {
		return nil
	}
	return ux
}

// grpcDialData dials a peer's data link: its Unix socket when the address is loopback and the
// socket exists, TCP otherwise.
func grpcDialData(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	if grpcUseUnix {
		if host, _, err := net.SplitHostPort(addr); err == nil && isLoopback(host) {
			if c, err := d.DialContext(ctx, "unix", grpcUnixName(addr)); err == nil {
				if uc, ok := c.(*net.UnixConn); ok && grpcUnixSndBuf > 0 {
					uc.SetWriteBuffer(grpcUnixSndBuf) // fewer wake-ups per message
				}
				return c, nil
			}
		}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// grpcUnixSndBuf is the send buffer of a Unix-domain data link (DDP_GRPC_UNIX_SNDBUF; 0: the
// kernel's default).
var grpcUnixSndBuf = grpcEnvInt("DDP_GRPC_UNIX_SNDBUF", 4<<20)

// sendPool is the buffer pool Marshal encodes outgoing frames into. Unlike gRPC's default pool
// it does not clear a buffer it hands out (Encode overwrites every byte), and it keeps a few
// buffers of the data plane's message size, so steady state allocates nothing.
type sendPool struct {
	mu   sync.Mutex
	free []*[]byte
}

var grpcSendPool = &sendPool{}

func (p *sendPool) Get(n int) *[]byte {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; cap(*b) >= n {
			p.free[i] = p.free[len(p.free)-1]
			p.free[len(p.free)-1] = nil
			p.free = p.free[:len(p.free)-1]
			p.mu.Unlock()
			*b = (*b)[:n]
			return b
		}
	}
	p.mu.Unlock()
	b := make([]byte, n)
	return &b
}

func (p *sendPool) Put(b *[]byte) {
	p.mu.Lock()
	if len(p.free) < 16 {
		p.free = append(p.free, b)
	} else { // keep the largest
		small := 0
		for i, f := range p.free {
			if cap(*f) < cap(*p.free[small]) {
				small = i
			}
		}
		if cap(*b) > cap(*p.free[small]) {
			p.free[small] = b
		}
	}
	p.mu.Unlock()
}

var _ mem.BufferPool = (*sendPool)(nil)

// framePool is a LIFO free list of gRPC frame buffers that does not clear them (gRPC's default
// pool zeroes every 16 KiB buffer it hands out; the framer overwrites it anyway). LIFO keeps
// the few buffers in use hot in cache.
type framePool struct {
	mu   sync.Mutex
	free []*[]byte
}

func (p *framePool) Get(n int) *[]byte {
	p.mu.Lock()
	if k := len(p.free); k > 0 && cap(*p.free[k-1]) >= n {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		p.mu.Unlock()
		*b = (*b)[:n]
		return b
	}
	p.mu.Unlock()
	b := make([]byte, n, max(n, rxFrameMax))
	return &b
}

func (p *framePool) Put(b *[]byte) {
	if cap(*b) != rxFrameMax {
		return
	}
	p.mu.Lock()
	if len(p.free) < 4096 {
		p.free = append(p.free, b)
	}
	p.mu.Unlock()
}
