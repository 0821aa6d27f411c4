//go:build cuda

package ddp

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
)

// runSelfAsRanks runs the test binary as the W ranks of one world on this host, each process
// running only the test named test with rankVar set to its rank (the test's cue to be a rank),
// the world's environment (RANK, WORLD_SIZE, a free MASTER_PORT on loopback) and DDP_TOKEN=token,
// each killed after 2 minutes. It returns, by rank, each process's combined output, its error
// (from exec: a non-zero exit, a kill) and when it ended.
func runSelfAsRanks(t *testing.T, W int, rankVar, token, test string) (outs []string, errs []error, ended []time.Time) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	outs, errs, ended = make([]string, W), make([]error, W), make([]time.Time, W)
	var wg sync.WaitGroup
	for r := range W {
		env := append(os.Environ(), rankVar+"="+strconv.Itoa(r), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(W),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DDP_TOKEN="+token)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v")
			c.Env = env
			b, err := c.CombinedOutput()
			outs[r], errs[r], ended[r] = string(b), err, time.Now()
		})
	}
	wg.Wait()
	return outs, errs, ended
}

// rankGroupFromEnv is the group of a rank that runSelfAsRanks started, the world its environment
// describes (allreduce.ConfigFromEnv); it is closed when the test ends.
func rankGroupFromEnv(t *testing.T) *allreduce.Group {
	t.Helper()
	cfg, err := allreduce.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	g, err := allreduce.NewGroup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
