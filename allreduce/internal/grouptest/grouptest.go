// Package grouptest builds worlds of allreduce Groups for the tests of allreduce's packages:
// the data planes' own tests (grpcnet, tcpnet, shm) run whole groups over their plane through
// it, as the core's tests do in-package. It is test support only; nothing else imports it.
package grouptest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/shm"
)

// QuietLogger drops everything below Error (failures in tests are expected and asserted).
func QuietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// NewGroups builds an n-rank world over the given transport kind, closed at test end, each
// group given its transport (allreduce.NewTransport's, or the in-process one) so that tests
// reach it through Transport and Plane. A master port that another process took between
// FreeAddr and rank 0's listen (other test binaries run beside this one) is retried on a fresh
// port: the race is the test's, not the code's.
func NewGroups(t testing.TB, kind string, n int, mod func(*allreduce.Config)) []*allreduce.Group {
	t.Helper()
	for attempt := 1; ; attempt++ {
		gs, err := tryNewGroups(t, kind, n, mod)
		if err == nil {
			t.Cleanup(func() {
				for _, g := range gs {
					g.Close()
					mu.Lock()
					delete(transports, g)
					mu.Unlock()
				}
			})
			return gs
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 3 {
			t.Fatal(err)
		}
	}
}

func tryNewGroups(t testing.TB, kind string, n int, mod func(*allreduce.Config)) ([]*allreduce.Group, error) {
	t.Helper()
	cfgs := make([]allreduce.Config, n)
	var nw *allreduce.InprocNetwork
	master := ""
	switch kind {
	case "inproc":
		nw = allreduce.NewInprocNetwork(n)
	case "grpc", "grpc-noshm", "tcp", "tcp-noshm", "tcp-inet":
		master = FreeAddr(t)
	}
	for r := range cfgs {
		cfgs[r] = allreduce.Config{Rank: r, WorldSize: n, MasterAddr: master, Token: "secret", Timeout: 5 * time.Second, Logger: QuietLogger()}
		if strings.HasPrefix(kind, "tcp") {
			cfgs[r].TransportKind = strings.TrimSuffix(kind, "-noshm")
		}
		if strings.HasSuffix(kind, "-noshm") {
			cfgs[r].SharedMemBytes = -1
		}
		if nw != nil {
			cfgs[r].Transport = nw.Transport(r)
		}
		if mod != nil {
			mod(&cfgs[r])
		}
	}
	gs := make([]*allreduce.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for r := range gs {
		wg.Go(func() {
			cfg := cfgs[r]
			if cfg.Transport == nil && n > 1 {
				if cfg.Transport, errs[r] = allreduce.NewTransport(ctx, cfg); errs[r] != nil {
					cancel() // the others would wait for the rendezvous until the deadline
					return
				}
			}
			gs[r], errs[r] = allreduce.NewGroup(ctx, cfg)
			if errs[r] != nil {
				cancel()
				return
			}
			mu.Lock()
			transports[gs[r]] = cfg.Transport
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, g := range gs {
			if g != nil {
				g.Close()
			}
		}
		if errs[0] != nil {
			return nil, fmt.Errorf("NewGroup rank 0: %w", errs[0])
		}
		return nil, fmt.Errorf("NewGroup: %w", err)
	}
	return gs, nil
}

func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Each runs f on every rank concurrently and returns the errors by rank.
func Each(gs []*allreduce.Group, f func(g *allreduce.Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(g) })
	}
	wg.Wait()
	return errs
}

func NoErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Inputs makes n ranks' buffers of size elements. dyadic: small multiples of 1/8, whose
// float32 sums are exact, so the ring must give the float64 sum exactly.
func Inputs(n, size int, seed uint64, dyadic bool) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(size)))
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, size)
		for i := range in[r] {
			if dyadic {
				in[r][i] = float32(rng.IntN(2001)-1000) / 8
			} else {
				in[r][i] = float32(rng.NormFloat64())
			}
		}
	}
	return in
}

func sum64(in [][]float32, i int) (s, abs float64) {
	for r := range in {
		s += float64(in[r][i])
		abs += math.Abs(float64(in[r][i]))
	}
	return s, abs
}

// CheckAllReduce runs one all-reduce and checks: bit-identical across ranks; f32 equal to the
// float64 sum (exact on dyadic data, within n-1 float32 roundings otherwise); f16 with relative
// L2 error at most 1e-3.
func CheckAllReduce(t *testing.T, gs []*allreduce.Group, size int, op allreduce.Op, wire allreduce.Wire, dyadic bool) {
	t.Helper()
	n := len(gs)
	in := Inputs(n, size, uint64(n)*31+uint64(wire), dyadic)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = append([]float32{}, in[r]...)
	}
	NoErrors(t, Each(gs, func(g *allreduce.Group) error {
		return g.AllReduce(context.Background(), bufs[g.Rank()], op, wire)
	}))
	for r := 1; r < n; r++ {
		for i := range bufs[r] {
			if math.Float32bits(bufs[r][i]) != math.Float32bits(bufs[0][i]) {
				t.Fatalf("rank %d [%d] = %g, rank 0 has %g: not bit-identical", r, i, bufs[r][i], bufs[0][i])
			}
		}
	}
	div := 1.0
	if op == allreduce.Avg {
		div = float64(n)
	}
	var errSq, refSq float64
	for i, got := range bufs[0] {
		s, abs := sum64(in, i)
		want := s / div
		switch {
		case wire == allreduce.WireF32 && dyadic:
			if float64(got) != want && float32(want) != got {
				t.Fatalf("n=%d size=%d [%d]: got %g, float64 sum %g", n, size, i, got, want)
			}
		case wire == allreduce.WireF32:
			bound := float64(n) * abs / div * (1.0 / (1 << 23))
			if math.Abs(float64(got)-want) > bound {
				t.Fatalf("n=%d size=%d [%d]: got %g, float64 sum %g (bound %g)", n, size, i, got, want, bound)
			}
		}
		errSq += (float64(got) - want) * (float64(got) - want)
		refSq += want * want
	}
	if wire == allreduce.WireF16 && size < 1000 {
		// Too few values for a statistical bound: Each element within its own rounding budget
		// (one half rounding per hop, relative to the magnitudes added).
		for i, got := range bufs[0] {
			s, abs := sum64(in, i)
			if d := math.Abs(float64(got) - s/div); d > float64(n+1)*abs/div*(1.0/(1<<11)) {
				t.Fatalf("n=%d size=%d [%d]: f16 result %g, float64 sum %g", n, size, i, got, s/div)
			}
		}
	}
	if wire == allreduce.WireF16 && size >= 1000 && refSq > 0 {
		if rel := math.Sqrt(errSq / refSq); rel > 1e-3 {
			t.Fatalf("n=%d size=%d %s: relative L2 error %.2e > 1e-3", n, size, op, rel)
		}
	}
}

// KillRank simulates the death of a rank's process.
func KillRank(t *testing.T, kind string, g *allreduce.Group) {
	switch kind {
	case "inproc":
		Transport(g).Close() // no goodbye: the links just break
	default:
		Transport(g).(link.Aborter).Abort()
	}
}

var (
	mu         sync.Mutex
	transports = map[*allreduce.Group]link.Transport{}
)

// Transport is the transport of a group NewGroups built (allreduce.NewTransport's, under the
// shared-memory decorator, or the in-process one); nil for a one-rank world.
func Transport(g *allreduce.Group) link.Transport {
	mu.Lock()
	defer mu.Unlock()
	return transports[g]
}

// Plane is the data plane of a group NewGroups built, under the shared-memory decorator.
func Plane(g *allreduce.Group) link.Transport {
	tr := Transport(g)
	if s, ok := tr.(*shm.Transport); ok {
		return s.Unwrap()
	}
	return tr
}
