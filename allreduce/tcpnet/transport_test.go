package tcpnet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/internal/grouptest"
	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/tcpnet"
)

// The tcp data plane checks the token (and the rank) of every connection and logs a refusal.
func TestTCP_wrongTokenRefused(t *testing.T) {
	for _, kind := range []string{"tcp", "tcp-inet"} {
		t.Run(kind, func(t *testing.T) { testTCPWrongToken(t, kind) })
	}
}

func testTCPWrongToken(t *testing.T, kind string) {
	rec := &leaftest.RecordingHandler{}
	gs := grouptest.NewGroups(t, kind, 2, func(c *allreduce.Config) {
		if c.Rank == 0 {
			c.Logger = slog.New(rec)
		}
	})
	addrs := grouptest.Plane(gs[0]).(*tcpnet.Transport).Addrs()
	// With a wrong token the dialler is the first to see it (rank 0's proof does not check out,
	// package auth); rank 0 still refuses the connection and logs it.
	for _, tc := range []struct {
		name, token string
		rank        int
		want        string
	}{{"wrong token", "wrong", 1, "did not prove the group token"}, {"own rank", "secret", 0, "refused"}, {"taken rank", "secret", 1, "refused"}} {
		// Rank 1's real link to rank 0 exists once it has sent something.
		grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.Barrier(context.Background()) }))
		err := tcpnet.DialAs(link.Config{Rank: tc.rank, WorldSize: 2, Token: tc.token, Timeout: 2 * time.Second, TransportKind: kind}, addrs, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: dial got %v, want %q", tc.name, err, tc.want)
		}
		// Rank 0 answers the dialler before it logs the refusal, so the dial can return first:
		// wait for the wrong token's line before the next dial, whose refusal from the same source
		// would otherwise come first and rate-limit it away (the guard logs a source once a
		// period: a flake of CI in session 13).
		for deadline := time.Now().Add(5 * time.Second); tc.name == "wrong token" && !rec.Has("wrong or missing token"); {
			if time.Now().After(deadline) {
				t.Fatalf("the wrong token's refusal not logged within 5 s: %v", rec.Msgs())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !rec.Has("wrong or missing token") || !rec.Has("refused") {
		t.Fatalf("refusals not logged: %v", rec.Msgs())
	}
	// The group still works.
	grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error {
		return g.AllReduce(context.Background(), make([]float32, 1000), allreduce.Sum, allreduce.WireF16)
	}))
}

// A squatter on a tcp-transport peer's addresses learns nothing: the dial fails naming the
// failed proof, and no byte it received contains the token.
func TestTCP_squatterLearnsNothing(t *testing.T) {
	const token = "the-group-token-0123456789"
	guess := append(bytes.Repeat([]byte{0x5a}, 32+macSize), 0, 0, 0) // a guess at the proof, and "welcome" (status OK)
	sq, addr := leaftest.NewSquatter(t, func(a string) string { return tcpnet.UnixName(a, token) }, guess)
	err := tcpnet.DialAs(link.Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second, TransportKind: link.TransportTCP}, []string{"", addr}, 1)
	if !errors.Is(err, auth.ErrListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, auth.ErrListener)
	}
	sq.CheckLearnedNothing(t, token, helloSize, macSize, tokenKey(token))
}

// The handshake's sizes and key (package auth), as a squatter sees them.
const (
	helloSize = 8 + 1 + 2 + 2 + 32 // magic, plane, rank, world, nonce
	macSize   = sha256.Size
)

func tokenKey(token string) []byte {
	k := sha256.Sum256([]byte("goddp-auth\x00" + token))
	return k[:]
}
