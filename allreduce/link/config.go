package link

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"
)

// Transport kinds (Config.TransportKind; allreduce.ConfigFromEnv reads DDP_TRANSPORT).
const (
	TransportGRPC    = "grpc"     // default: gRPC streams (package grpcnet)
	TransportTCP     = "tcp"      // raw sockets, Unix-domain to loopback peers, gRPC rendezvous (package tcpnet)
	TransportTCPInet = "tcp-inet" // raw TCP only
)

// ParseTransportKind validates a Config.TransportKind ("" is grpc).
func ParseTransportKind(k string) (string, error) {
	switch k {
	case "", TransportGRPC:
		return TransportGRPC, nil
	case TransportTCP, TransportTCPInet:
		return k, nil
	}
	return "", fmt.Errorf("allreduce: unknown transport kind %q (want %s, %s or %s)", k, TransportGRPC, TransportTCP, TransportTCPInet)
}

// Defaults for zero Config fields.
const (
	DefaultTimeout           = 30 * time.Second
	DefaultChunkBytes        = 1 << 20 // 1 MiB of wire bytes per frame: big enough to amortise gRPC, small enough to pipeline
	DefaultRendezvousTimeout = 5 * time.Minute
	DefaultSharedMemBytes    = 8 << 20 // ring per same-host link: about 8 frames of the default 1 MiB chunk

	// The data planes' developer knobs (docs/perf-allreduce.md measured each).
	DefaultUnixSendBuf   = 4 << 20  // SO_SNDBUF of a Unix-domain data link: fewer wake-ups per 1 MiB chunk than the kernel's ~208 KiB
	DefaultGRPCWindow    = 64 << 20 // gRPC per-stream and per-connection flow-control window
	DefaultGRPCWriteBuf  = 4 << 20  // gRPC's write buffer per connection
	DefaultGRPCReadBuf   = 4 << 20  // gRPC's read buffer per connection (where gRPC buffers reads itself)
	DefaultGRPCSlabBytes = 1 << 20  // the blocks rxConn reads a gRPC connection into (package grpcnet)
)

// Config describes one rank's place in a group. Zero fields take the defaults above.
type Config struct {
	// Rank of this process, 0 <= Rank < WorldSize.
	Rank, WorldSize int
	// MasterAddr is host:port of rank 0's rendezvous server (MASTER_ADDR:MASTER_PORT). Rank 0
	// listens there; it also carries rank 0's data plane.
	MasterAddr string
	// Token is the shared secret every connection must present (DDP_TOKEN). Peers without it
	// are refused and the refusal is logged. Empty means no check (tests, single host).
	Token string
	// Timeout bounds how long a collective waits for its peer: no frame from the rank it is
	// receiving from (or no progress sending to the next) for Timeout fails the collective.
	// Default 30 s.
	Timeout time.Duration
	// RendezvousTimeout bounds NewGroup's wait for all ranks to join (beside ctx). Default 5 min.
	RendezvousTimeout time.Duration
	// ChunkBytes is the pipeline chunk, in wire bytes: each rank's segment is cut into chunks so
	// sending one overlaps receiving and reducing the next. Default 1 MiB.
	ChunkBytes int
	// ListenAddr is where this rank's data plane listens. Rank 0 always uses MasterAddr. Default
	// for others: port 0 on MasterAddr's host when that host is a loopback address; otherwise
	// port 0 on AdvertiseAddr's host, or on the local address of the route to MasterAddr — never
	// every interface.
	ListenAddr string
	// AdvertiseAddr is the address other ranks dial for this rank's data plane. Default: the
	// listener's address, with an unspecified host replaced by the address rank 0 saw us from.
	AdvertiseAddr string
	// TransportKind picks the network transport when Transport is nil: TransportGRPC ("grpc",
	// the default: gRPC streams) or TransportTCP ("tcp": the same gRPC rendezvous and token, then
	// frames on raw sockets, far less CPU per byte — Unix-domain sockets to peers on loopback,
	// TCP otherwise; no TLS); TransportTCPInet ("tcp-inet") is "tcp" without Unix sockets.
	// ConfigFromEnv reads it from DDP_TRANSPORT. Every rank must use grpc, or every rank a tcp kind.
	TransportKind string
	// SharedMemBytes is the size of the shared-memory ring on each same-host link, of either
	// kind (package shm): frames up to half of it are cast straight into memory the peer reduces
	// from; the socket or the gRPC stream no longer carries them.
	// 0 means DefaultSharedMemBytes, negative none (frames are messages on the link); rounded
	// up to whole pages, at most 1 GiB.
	// Either side of a link can decline. ConfigFromEnv reads DDP_SHM_BYTES (0 there: none).
	SharedMemBytes int
	// Transport, if set, is used instead of gRPC, and no rendezvous happens (the transport
	// already knows every rank): allreduce.NewInprocNetwork(n).Transport(rank) in tests.
	Transport Transport
	// Logger receives refusals, failures and lifecycle events. Default slog.Default().
	Logger *slog.Logger
	// TLS, if set, secures the gRPC data plane both ways (as server and client config).
	TLS *tls.Config

	// Developer knobs of the data planes, for measuring (docs/perf-allreduce.md); the zero
	// value of each is what was measured best and what runs by default. ConfigFromEnv reads
	// each from the environment variable named beside it.

	// GRPCNoUnix makes gRPC data links to loopback peers use TCP instead of the Unix-domain
	// twin of the peer's listener (package grpcnet); a rank with it set also serves no Unix
	// socket. DDP_GRPC_UNIX=0.
	GRPCNoUnix bool
	// GRPCUnixSendBuf is SO_SNDBUF of a gRPC Unix-domain data link, in bytes (capped by the
	// kernel's net.core.wmem_max). 0 means DefaultUnixSendBuf (4 MiB), negative the kernel's
	// default. DDP_GRPC_UNIX_SNDBUF (0 there: the kernel's default).
	GRPCUnixSendBuf int
	// TCPUnixSendBuf is the same for the tcp kind's Unix-domain links (package tcpnet):
	// 4 MiB took the 64 MiB f16 ring from ~90 to ~70 ms at 4 ranks on the 2-core VM, before
	// shared memory. DDP_UNIX_SNDBUF (0 there: the kernel's default).
	TCPUnixSendBuf int
	// GRPCWindow is gRPC's flow-control window per stream and per connection, in bytes: how
	// much a sender may have in flight toward a peer. 0 means DefaultGRPCWindow (64 MiB);
	// otherwise 64 KiB (gRPC's minimum) to 1 GiB. DDP_GRPC_WINDOW.
	GRPCWindow int
	// GRPCWriteBuf is gRPC's write buffer per connection, in bytes: writes are coalesced up
	// to it. 0 means DefaultGRPCWriteBuf (4 MiB), negative none (every frame a write).
	// DDP_GRPC_WBUF (0 there: none).
	GRPCWriteBuf int
	// GRPCReadBuf is the gRPC server's read buffer per connection, in bytes, where gRPC
	// buffers reads itself: with TLS, or with GRPCNoRxInPlace. 0 means DefaultGRPCReadBuf
	// (4 MiB), negative none. DDP_GRPC_RBUF (0 there: none).
	GRPCReadBuf int
	// GRPCNoRxInPlace makes the gRPC server read connections through gRPC's own read buffer
	// (GRPCReadBuf) instead of rxConn, which lets the framer read DATA payloads in place
	// (package grpcnet). DDP_GRPC_RX=0.
	GRPCNoRxInPlace bool
	// GRPCSlabBytes is the size of the blocks rxConn reads a connection into, in bytes. 0
	// means DefaultGRPCSlabBytes (1 MiB); otherwise 64 KiB to 1 GiB. DDP_GRPC_SLAB.
	GRPCSlabBytes int

	// GRPCListen and GRPCDial, if set, replace net.Listen and the dialler of every connection
	// of the gRPC plane and of the rendezvous: its server's listener, the Unix-domain twin's,
	// rank 0's own Join server, the dials of links and of Join. Tests serve them from memory
	// (allreduce/internal/memnet, over google.golang.org/grpc/test/bufconn) where a test is about
	// the protocol and not the socket. A listener's Addr must be the address listened at (port
	// 0: a port of its own), since ranks announce it. Never read from the environment.
	GRPCListen func(network, addr string) (net.Listener, error)
	GRPCDial   func(ctx context.Context, network, addr string) (net.Conn, error)
}

// WithDefaults validates cfg and fills zero fields. NewGroup calls it; a data plane is handed
// the Config it returns.
func (cfg Config) WithDefaults() (Config, error) {
	if cfg.WorldSize < 1 {
		return cfg, fmt.Errorf("allreduce: world size %d must be at least 1", cfg.WorldSize)
	}
	if cfg.WorldSize > 1<<15 {
		return cfg, fmt.Errorf("allreduce: world size %d is too large", cfg.WorldSize)
	}
	if cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize {
		return cfg, fmt.Errorf("allreduce: rank %d is outside [0,%d)", cfg.Rank, cfg.WorldSize)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RendezvousTimeout <= 0 {
		cfg.RendezvousTimeout = DefaultRendezvousTimeout
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = DefaultChunkBytes
	}
	if cfg.ChunkBytes < 64 {
		cfg.ChunkBytes = 64
	}
	if cfg.ChunkBytes > MaxFramePayload {
		cfg.ChunkBytes = MaxFramePayload
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.SharedMemBytes == 0:
		cfg.SharedMemBytes = DefaultSharedMemBytes
	case cfg.SharedMemBytes > 1<<30:
		return cfg, fmt.Errorf("allreduce: shared-memory ring of %d bytes is over 1 GiB", cfg.SharedMemBytes)
	case cfg.SharedMemBytes > 0:
		cfg.SharedMemBytes = (cfg.SharedMemBytes + 4095) &^ 4095
	}
	for _, k := range []struct {
		field string
		v     *int
		def   int
		min   int // smallest positive value allowed
		neg   bool
	}{
		{"GRPCUnixSendBuf", &cfg.GRPCUnixSendBuf, DefaultUnixSendBuf, 1, true},
		{"TCPUnixSendBuf", &cfg.TCPUnixSendBuf, DefaultUnixSendBuf, 1, true},
		{"GRPCWindow", &cfg.GRPCWindow, DefaultGRPCWindow, 64 << 10, false},
		{"GRPCWriteBuf", &cfg.GRPCWriteBuf, DefaultGRPCWriteBuf, 1, true},
		{"GRPCReadBuf", &cfg.GRPCReadBuf, DefaultGRPCReadBuf, 1, true},
		{"GRPCSlabBytes", &cfg.GRPCSlabBytes, DefaultGRPCSlabBytes, 64 << 10, false},
	} {
		switch v := *k.v; {
		case v == 0:
			*k.v = k.def
		case v < 0 && k.neg:
			*k.v = -1
		case v < 0:
			return cfg, fmt.Errorf("allreduce: Config.%s = %d is negative", k.field, v)
		case v < k.min:
			return cfg, fmt.Errorf("allreduce: Config.%s = %d is below %d", k.field, v, k.min)
		case v > 1<<30 || v > math.MaxInt32:
			return cfg, fmt.Errorf("allreduce: Config.%s = %d is over 1 GiB", k.field, v)
		}
	}
	kind, err := ParseTransportKind(cfg.TransportKind)
	if err != nil {
		return cfg, err
	}
	cfg.TransportKind = kind
	if cfg.WorldSize > 1 && cfg.Transport == nil && cfg.MasterAddr == "" {
		return cfg, fmt.Errorf("allreduce: rank %d of %d needs MasterAddr (MASTER_ADDR:MASTER_PORT) or a Transport", cfg.Rank, cfg.WorldSize)
	}
	return cfg, nil
}

// ListenAddress picks this rank's data-plane bind address (the rule Config.ListenAddr states).
func (cfg Config) ListenAddress() (string, error) {
	if cfg.Rank == 0 {
		return cfg.MasterAddr, nil
	}
	if cfg.ListenAddr != "" {
		return cfg.ListenAddr, nil
	}
	host, _, err := net.SplitHostPort(cfg.MasterAddr)
	if err != nil {
		return "", fmt.Errorf("allreduce: MasterAddr %q: %w", cfg.MasterAddr, err)
	}
	if host == "localhost" {
		return "127.0.0.1:0", nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return net.JoinHostPort(host, "0"), nil
	}
	// Another host: bind the address other ranks will dial, not every interface. That is the
	// host of AdvertiseAddr when set, else the local address the route to rank 0 leaves from
	// (the one rank 0 sees us from, and advertises: join). A UDP "connection" sends nothing.
	if cfg.AdvertiseAddr != "" {
		if h, _, err := net.SplitHostPort(cfg.AdvertiseAddr); err == nil && h != "" {
			return net.JoinHostPort(h, "0"), nil
		}
	}
	c, err := net.Dial("udp", cfg.MasterAddr)
	if err != nil {
		return "", fmt.Errorf("allreduce: rank %d: no route to rank 0 at %s to pick a listen address (set ListenAddr): %w", cfg.Rank, cfg.MasterAddr, err)
	}
	defer c.Close()
	return net.JoinHostPort(c.LocalAddr().(*net.UDPAddr).IP.String(), "0"), nil
}

// ListenGRPC listens as the gRPC plane and the rendezvous do: GRPCListen, or net.Listen.
func (cfg Config) ListenGRPC(network, addr string) (net.Listener, error) {
	if cfg.GRPCListen != nil {
		return cfg.GRPCListen(network, addr)
	}
	return net.Listen(network, addr)
}

// DialGRPC dials as the gRPC plane and the rendezvous do: GRPCDial, or a net.Dialer.
func (cfg Config) DialGRPC(ctx context.Context, network, addr string) (net.Conn, error) {
	if cfg.GRPCDial != nil {
		return cfg.GRPCDial(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// IsLoopback says whether host (a name or an IP) is this host's loopback: a peer there shares
// this rank's network namespace, so Unix sockets in the abstract namespace reach it.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
