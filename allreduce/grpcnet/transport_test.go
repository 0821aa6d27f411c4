package grpcnet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/grpcnet"
	"github.com/goddp/goddp/allreduce/internal/grouptest"
	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/internal/memnet"
	"github.com/goddp/goddp/allreduce/link"
)

// testTLS is a mutual-TLS config with a fresh self-signed certificate that every rank shares
// (verification as TLSFromEnv does it: the chain against the CA, no host names).
func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "goddp test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:         tls.RequireAnyClientCert,
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		},
	}
}

// The gRPC data plane with TLS: all-reduce (both wires, a size that spans many HTTP/2 frames
// and chunks), broadcast and all-gather are correct; with Unix sockets on (the default on
// Linux) the links run TLS over them.
func TestGRPC_TLS(t *testing.T) {
	tc := testTLS(t)
	gs := grouptest.NewGroups(t, "grpc", 3, func(c *allreduce.Config) { c.TLS = tc; c.ChunkBytes = 64 << 10 })
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16} {
		grouptest.CheckAllReduce(t, gs, 300_001, allreduce.Sum, wire, wire == allreduce.WireF32)
	}
	grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error {
		b := make([]byte, 100_000)
		if g.Rank() == 1 {
			for i := range b {
				b[i] = byte(i)
			}
		}
		if err := g.Broadcast(context.Background(), b, 1); err != nil {
			return err
		}
		for i := range b {
			if b[i] != byte(i) {
				t.Errorf("rank %d: broadcast byte %d = %d", g.Rank(), i, b[i])
				break
			}
		}
		return nil
	}))
}

// A rank without TLS cannot join a TLS world. (On an in-memory network: the handshakes are
// the test, not the sockets.)
func TestGRPC_TLSRequired(t *testing.T) {
	mn := memnet.New()
	const master = "127.0.0.1:29500"
	tc := testTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		g, err := allreduce.NewGroup(ctx, link.Config{Rank: 0, WorldSize: 2, MasterAddr: master, Token: "t", TLS: tc, Logger: grouptest.QuietLogger(), RendezvousTimeout: 2 * time.Second,
			GRPCListen: mn.Listen, GRPCDial: mn.Dial})
		if g != nil {
			g.Close()
		}
		done <- err
	}()
	_, err := allreduce.NewGroup(ctx, link.Config{Rank: 1, WorldSize: 2, MasterAddr: master, Token: "t", Logger: grouptest.QuietLogger(), RendezvousTimeout: 2 * time.Second,
		GRPCListen: mn.Listen, GRPCDial: mn.Dial})
	if err == nil {
		t.Fatal("a plaintext rank joined a TLS world")
	}
	if err0 := <-done; err0 == nil {
		t.Fatal("rank 0 formed a group with a plaintext peer")
	}
}

// Loopback peers get a Unix-domain twin of the gRPC listener, and data links dial it.
func TestGRPC_unixDataLink(t *testing.T) {
	if !auth.UseUnix(link.Config{}) {
		t.Skip("no Unix-domain data links on this platform")
	}
	gs := grouptest.NewGroups(t, "grpc", 2, nil)
	tr := grpcnet.Plane(grouptest.Plane(gs[1]))
	if !tr.HasUnixListener() {
		t.Fatal("rank 1 listens on loopback but has no Unix-domain listener")
	}
	c, err := auth.DialConn(context.Background(), tr.ListenAddr(), tr.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.UnixConn); !ok {
		t.Fatalf("data link to a loopback peer is %T, want a Unix socket", c)
	}
	// Without the group's token, the socket's name is another: the dial falls back to TCP.
	c2, err := auth.DialConn(context.Background(), tr.ListenAddr(), link.Config{Token: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, ok := c2.(*net.TCPConn); !ok {
		t.Fatalf("a dial with another token reached %T, want TCP", c2)
	}
	grouptest.CheckAllReduce(t, gs, 100_003, allreduce.Avg, allreduce.WireF16, false)

	// link.Config.GRPCNoUnix: no twin listener, and links over TCP.
	gs = grouptest.NewGroups(t, "grpc", 2, func(c *allreduce.Config) { c.GRPCNoUnix = true })
	if tr := grpcnet.Plane(grouptest.Plane(gs[1])); tr.HasUnixListener() {
		t.Fatal("a rank with GRPCNoUnix serves a Unix socket")
	}
	grouptest.CheckAllReduce(t, gs, 100_003, allreduce.Avg, allreduce.WireF16, false)
	for r, g := range gs {
		if to := grpcnet.Plane(grouptest.Plane(g)).UnixOut(); len(to) > 0 {
			t.Fatalf("GRPCNoUnix: links %d->%v are Unix sockets", r, to)
		}
	}
}

// A gRPC client that does not make the handshake (package auth) reaches nothing, even on the right
// Unix socket: the listener refuses the connection before gRPC reads it, and logs it.
func TestGRPC_pushWithoutHandshakeRefused(t *testing.T) {
	rec := &leaftest.RecordingHandler{}
	gs := grouptest.NewGroups(t, "grpc", 2, func(c *allreduce.Config) {
		if c.Rank == 1 {
			c.Logger = slog.New(rec)
		}
	})
	tr := grpcnet.Plane(grouptest.Plane(gs[1]))
	conn, err := grpc.NewClient("passthrough:///"+tr.ListenAddr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return auth.DialConn(ctx, addr, tr.Config()) }),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcnet.RawCodec)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := conn.NewStream(ctx, grpcnet.PushStreamDesc, "/"+link.ServiceName+"/Push")
	if err == nil {
		err = st.SendMsg(grpcnet.PushMsg(make([]byte, link.FrameHeaderSize)))
		if err == nil {
			st.CloseSend()
			var resp []byte
			err = st.RecvMsg(&resp)
		}
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		t.Fatalf("push without the handshake: %v, want the connection refused", err)
	}
	if !rec.Has("not goddp's") {
		t.Fatalf("refusal not logged: %v", rec.Msgs())
	}
}

// Plaintext links read DATA payloads in place (rxConn): the big frames of a large all-reduce
// are aliased, not copied, and the results are right (both wires, odd sizes, several chunk
// sizes including ones that cut frames at odd places), also over TCP.
func TestGRPC_receiveInPlace(t *testing.T) {
	for _, chunk := range []int{1 << 20, 16<<10 - 45, 100_003} {
		// The gRPC read path itself: no shared memory.
		gs := grouptest.NewGroups(t, "grpc-noshm", 3, func(c *allreduce.Config) { c.ChunkBytes = chunk })
		for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16} {
			grouptest.CheckAllReduce(t, gs, 1_500_007, allreduce.Sum, wire, wire == allreduce.WireF32)
		}
		a, c, slabs := grpcnet.Plane(grouptest.Plane(gs[1])).RxCounts()
		t.Logf("chunk %d: %d payloads read in place, %d copied", chunk, a, c)
		if a == 0 || c > a/10 {
			t.Errorf("chunk %d: %d payloads read in place, %d copied", chunk, a, c)
		}
		if n := slabs; n > grpcnet.RxSlabsSpare {
			t.Errorf("chunk %d: %d slabs allocated: they are not reused", chunk, n)
		}
	}
}

// Issue 30, item 3: the first send to a peer that died before this rank ever linked to it (the
// abort frame a failing rank sends its ring neighbour, through the shared-memory hello) waits
// for the peer no longer than the caller's context, and leaves no link behind, so the
// transport's Close does not wait for it either.
func TestGRPC_linkToDeadPeerTakesTheContext(t *testing.T) {
	gs := grouptest.NewGroups(t, "grpc", 2, nil)
	tr := grpcnet.Plane(grouptest.Plane(gs[1]))
	if tr.HasLink(0) {
		t.Fatal("rank 1 already has a link to rank 0: the test proves nothing")
	}
	grouptest.KillRank(t, "grpc", gs[0])
	done := make(chan error, 2)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done <- tr.Send(ctx, 0, link.Bytes(make([]byte, 64)))
	}()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := tr.LinkTo(ctx, 0)
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a send to a dead peer succeeded")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a send to a dead peer ignored its 300 ms context")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("sends to a dead peer took %v with a 300 ms context", d)
	}
	closed := make(chan struct{})
	go func() { tr.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the dead peer")
	}
}
