package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// StaticConfig configures a StaticRendezvous: one host of a job whose hosts are fixed, torchrun's
// static rendezvous (`--nnodes N --node-rank R --master-addr A --master-port P`, or
// `--rdzv-endpoint A:P` with `--rdzv-backend static`, or c10d with a fixed node rank). Every host
// is told the number of hosts, its own node rank and node rank 0's address; nothing is
// negotiated, so the world never changes (no elasticity), and a lost host shows only as its
// peers' workers failing (the gossip rendezvous, MemberlistRendezvous, names it).
type StaticConfig struct {
	NNodes   int // --nnodes N
	NodeRank int // --node-rank R, 0 ≤ R < NNodes
	NProc    int // workers on this host; every host must run the same number (nothing checks it)

	// MasterAddr and MasterPort are node rank 0's host and port: its global rank 0 serves the
	// workers' rendezvous there (goddp's allreduce, or a PyTorch rank 0's TCPStore), so the port
	// must be known in advance, never 0.
	MasterAddr string
	MasterPort int

	// Job (--rdzv-id) and Key (the cluster key, or nil) give DDP_TOKEN: StaticToken, which every
	// host computes alike without sending it.
	Job string
	Key []byte

	// Timeout bounds how long a host of node rank above 0 waits, before each attempt, for the
	// master to accept a connection; 0 = 15 minutes (--rdzv-timeout).
	Timeout time.Duration
	// Retry is the pause between two tries; 0 = 500 ms.
	Retry time.Duration
	// Dial opens one connection to addr (host:port) and closes it, nil when it connected; nil =
	// a TCP connect with a 2 s timeout. Tests replace it.
	Dial func(ctx context.Context, addr string) error

	Logger *slog.Logger // nil = slog.Default()
}

// StaticRendezvous is the Rendezvous of StaticConfig. Node rank 0 starts its workers at once;
// a host of another node rank first waits until MasterAddr:MasterPort accepts a TCP connection
// (global rank 0 is listening), and fails with a *MasterUnreachableError naming the master when
// it does not within Timeout. The probe connects and closes without a byte: goddp's rank 0 logs
// such a connection at debug level only, a PyTorch TCPStore drops it.
type StaticRendezvous struct {
	cfg StaticConfig
	log *slog.Logger
}

var _ Rendezvous = (*StaticRendezvous)(nil)

// NewStaticRendezvous checks cfg and fills its defaults.
func NewStaticRendezvous(cfg StaticConfig) (*StaticRendezvous, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Minute
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 500 * time.Millisecond
	}
	if cfg.Dial == nil {
		cfg.Dial = dialTCP
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &StaticRendezvous{cfg: cfg, log: cfg.Logger}, nil
}

func (c StaticConfig) check() error {
	var err error
	switch {
	case c.NNodes < 1:
		err = fmt.Errorf("--nnodes %d: want at least 1", c.NNodes)
	case c.NodeRank < 0 || c.NodeRank >= c.NNodes:
		err = fmt.Errorf("--node-rank %d: want 0..%d (--nnodes %d)", c.NodeRank, c.NNodes-1, c.NNodes)
	case c.NProc < 1:
		err = fmt.Errorf("--nproc-per-node %d: want at least 1", c.NProc)
	case c.MasterAddr == "":
		err = errors.New("static rendezvous: no master address (--master-addr or --rdzv-endpoint)")
	case c.MasterPort < 1 || c.MasterPort > 65535:
		err = fmt.Errorf("static rendezvous: master port %d: want 1..65535 (every host must know it)", c.MasterPort)
	}
	if err != nil {
		return &ConfigError{Err: err}
	}
	return nil
}

// Master is MASTER_ADDR:MASTER_PORT as one host:port.
func (c StaticConfig) Master() string {
	return net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
}

// Assignment is this host's part of attempt: node rank R of NNodes, global ranks R·NProc ..
// R·NProc+NProc-1, the master as configured, and StaticToken. A pure function of c and attempt,
// the same on every host.
func (c StaticConfig) Assignment(attempt int) Assignment {
	return Assignment{
		NodeRank: c.NodeRank, NNodes: c.NNodes, RankOffset: c.NodeRank * c.NProc, WorldSize: c.NNodes * c.NProc,
		MasterAddr: c.MasterAddr, MasterPort: c.MasterPort, Token: StaticToken(c.Key, c.Job, attempt),
	}
}

// StaticToken is DDP_TOKEN of a static job's attempt: DeriveToken(key, job) for attempt 0, as
// the gossip rendezvous gives, and a token of its own for each restart. The hosts of a static job
// restart on their own, each when its workers fail, at the same port; with one token per attempt
// a restarted rank that reaches a master of the attempt before (still winding down) fails its
// handshake and keeps retrying until the new master listens, instead of joining the old world.
// torchrun separates its attempts the same way (its store keys carry the attempt number).
func StaticToken(key []byte, job string, attempt int) string {
	if attempt == 0 {
		return DeriveToken(key, job)
	}
	return DeriveToken(key, job+"\x00restart "+strconv.Itoa(attempt))
}

// MasterUnreachableError is Next's error when node rank 0's MASTER_ADDR:MASTER_PORT did not
// accept a connection within the rendezvous timeout.
type MasterUnreachableError struct {
	Master   string // host:port
	NodeRank int    // this host's
	Timeout  time.Duration
	Err      error // the last attempt's error
}

func (e *MasterUnreachableError) Error() string {
	return fmt.Sprintf("launcher: static rendezvous: node rank %d could not reach the master %s (MASTER_ADDR:MASTER_PORT, "+
		"where node rank 0's rank 0 listens) within %v: %v; is ddplaunch running there with --node-rank 0 and the same "+
		"--master-port, and is the port open?", e.NodeRank, e.Master, e.Timeout, e.Err)
}

func (e *MasterUnreachableError) Unwrap() error { return e.Err }

// Next returns Assignment(attempt); a host of node rank above 0 first waits for the master.
func (r *StaticRendezvous) Next(ctx context.Context, attempt int) (Assignment, error) {
	if err := ctx.Err(); err != nil {
		return Assignment{}, err
	}
	a := r.cfg.Assignment(attempt)
	if r.cfg.NodeRank > 0 {
		if err := r.waitMaster(ctx); err != nil {
			return Assignment{}, err
		}
	}
	r.log.Info("ddplaunch: static rendezvous", "node_rank", a.NodeRank, "nnodes", a.NNodes,
		"ranks", fmt.Sprintf("%d..%d", a.RankOffset, a.RankOffset+r.cfg.NProc-1), "world_size", a.WorldSize,
		"master", r.cfg.Master(), "attempt", attempt)
	return a, nil
}

// waitMaster tries the master every Retry until it accepts a connection, ctx ends, or Timeout
// passes.
func (r *StaticRendezvous) waitMaster(ctx context.Context) error {
	addr := r.cfg.Master()
	deadline := time.NewTimer(r.cfg.Timeout)
	defer deadline.Stop()
	for try := 0; ; try++ {
		err := r.cfg.Dial(ctx, addr)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if try == 0 {
			r.log.Info("ddplaunch: static rendezvous: waiting for the master", "master", addr, "timeout", r.cfg.Timeout, "err", err)
		}
		retry := time.NewTimer(r.cfg.Retry)
		select {
		case <-ctx.Done():
			retry.Stop()
			return ctx.Err()
		case <-deadline.C:
			retry.Stop()
			return &MasterUnreachableError{Master: addr, NodeRank: r.cfg.NodeRank, Timeout: r.cfg.Timeout, Err: err}
		case <-retry.C:
		}
	}
}

// dialTCP is StaticConfig.Dial's default.
func dialTCP(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
