package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
)

// Assignment is one host's part of one attempt of a job: what rendezvous agreed on. Global ranks of
// this host's workers are RankOffset .. RankOffset+LocalWorldSize-1.
type Assignment struct {
	NodeRank   int // this host, 0 ≤ NodeRank < NNodes
	NNodes     int // hosts in this attempt
	RankOffset int // global rank of this host's local rank 0 (NodeRank·nproc when every host runs nproc)
	WorldSize  int // workers in this attempt, all hosts

	MasterAddr string // where global rank 0 listens
	MasterPort int    // its port; never 0
	Token      string // DDP_TOKEN: the same on every host of the job

	// Lost, when not nil, delivers an error (and is then never read again) if the membership of
	// this attempt breaks while its workers run: a peer host died, left, or failed its own attempt.
	// Run then stops the local workers and counts the attempt as failed. Nil means the membership
	// cannot break (one host).
	Lost <-chan error
}

// Rendezvous decides who is in each attempt of a job. Run calls Next once before each attempt,
// from one goroutine, with attempt = 0, 1, 2, ...; never concurrently.
//
// Next blocks until the hosts of the job agree on the attempt (or ctx ends, in which case it returns
// ctx's error) and returns this host's Assignment. An error ends the job: Run returns it wrapped.
// Next may return a different world for each attempt (elastic restarts); every host must see the
// same WorldSize, MasterAddr, MasterPort and Token for the same attempt.
//
// The single-host implementation is LocalRendezvous. The multi-host one (memberlist gossip,
// issue 7) plugs in through Options.Rendezvous and may also implement AttemptReporter and io.Closer.
type Rendezvous interface {
	Next(ctx context.Context, attempt int) (Assignment, error)
}

// AttemptReporter is an optional capability of a Rendezvous: Run calls ReportEnd once after each
// attempt's workers have all exited, with nil when they all exited 0, or the error that ended the
// attempt (*WorkerError, *SignalError, a context error, or the error received from Lost). A
// multi-host rendezvous uses it to tell the other hosts at once. It must not block for long.
type AttemptReporter interface {
	ReportEnd(attempt int, err error)
}

// LossExplainer is an optional capability of a multi-host Rendezvous. When an attempt fails on
// this host (a worker failed, or Lost reported another host's failure), Run asks it after ReportEnd
// whether a lost host explains the failure: a dead peer usually breaks the workers' ring before
// gossip declares it dead. ExplainFailure may wait up to the failure-detection bound; it returns
// the loss (Run then reports that host as the cause) or nil when no host was lost.
type LossExplainer interface {
	ExplainFailure(ctx context.Context, attempt int) error
}

// LocalRendezvous is the single-host Rendezvous: node rank 0 of 1, the master on this host.
// With Port 0 every attempt gets a fresh free port, so a restart never races the previous
// attempt's socket in TIME_WAIT. The token is drawn once, in NewLocalRendezvous, and kept for
// every attempt of the job.
type LocalRendezvous struct {
	Addr  string // MASTER_ADDR; "" means 127.0.0.1
	Port  int    // MASTER_PORT; 0 means a free port per attempt
	NProc int    // workers on this host (= WORLD_SIZE)
	token string
}

var _ Rendezvous = (*LocalRendezvous)(nil)

// NewLocalRendezvous returns a LocalRendezvous with a fresh job token.
func NewLocalRendezvous(addr string, port, nproc int) (*LocalRendezvous, error) {
	tok, err := NewToken()
	if err != nil {
		return nil, err
	}
	return &LocalRendezvous{Addr: addr, Port: port, NProc: nproc, token: tok}, nil
}

// Next returns node 0 of 1 with the configured or a fresh free port. It never blocks.
func (r *LocalRendezvous) Next(ctx context.Context, attempt int) (Assignment, error) {
	if err := ctx.Err(); err != nil {
		return Assignment{}, err
	}
	if r.NProc < 1 {
		return Assignment{}, errors.New("launcher: local rendezvous: NProc must be at least 1")
	}
	addr := r.Addr
	if addr == "" {
		addr = DefaultMasterAddr
	}
	port := r.Port
	if port == 0 {
		p, err := FreePort(addr)
		if err != nil {
			return Assignment{}, fmt.Errorf("launcher: attempt %d: %w", attempt, err)
		}
		port = p
	}
	return Assignment{
		NodeRank: 0, NNodes: 1, RankOffset: 0, WorldSize: r.NProc,
		MasterAddr: addr, MasterPort: port, Token: r.token,
	}, nil
}

// DefaultMasterAddr is MASTER_ADDR when --master-addr is not given.
const DefaultMasterAddr = "127.0.0.1"

// NewToken returns 32 bytes from crypto/rand as 64 hex digits.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("launcher: job token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// FreePort asks the kernel for a free TCP port on host (any interface when host is not local) and
// releases it. As with torchrun, another process may take it before rank 0 binds it: goddp's
// trainer then exits ExitMasterPortTaken and Run draws a new one without counting a restart (one
// host); other programs' attempts restart under --max-restarts.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		l, err = net.Listen("tcp", ":0")
	}
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
