package tcpnet_test

import (
	"context"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/tcpnet"
)

// A data link to a peer that accepts the connection and never answers the handshake (a
// stopped process: its kernel still accepts) ends as soon as the Send's context does, with the
// context's error; before, it waited for the handshake's 10 s Deadline whatever the context.
func TestTCP_dialToSilentPeerTakesTheContext(t *testing.T) {
	addr, hello := leaftest.SilentPeer(t, 8) // the hello's magic

	cfg := link.Config{Rank: 1, WorldSize: 2, Token: "tok", Timeout: time.Minute, TransportKind: link.TransportTCP}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- tcpnet.DialAsContext(ctx, cfg, []string{addr, ""}, 0) }()
	leaftest.CancelAfterHello(t, hello, cancel, errc, 2*time.Second, "the data-plane handshake")
}
