package allreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
)

// Hierarchy is the hierarchical all-reduce of a world of hosts × local ranks (hier_schedule.go):
// reduce-scatter inside the host, the flat ring between hosts on each local rank's share,
// all-gather inside the host. It runs over three groups: the world's (main, numbered host by
// host), the ring of this rank's host (intra, numbered by local rank) and the ring of this
// local rank's peers on the other hosts (inter, numbered by host). AllReduce is hierarchical;
// every other collective is main's (ReduceScatter and AllGatherSegments keep the world's flat
// segments, which ddp's sharded optimizer plans on).
//
// On the CPU both the intra and the inter ring run over the host planes (shared memory inside a
// host); on a multi-GPU host the intra stage is where a device all-reduce goes (issue 34).
//
// A failure in one ring breaks the other too, naming the same rank: the ring that failed tells
// its next rank (an abort frame, as any failed collective does) and Hierarchy sends the same
// abort along this rank's other ring, so every rank of the world that waits on a rank of the
// failing one learns of it, by its global rank.
type Hierarchy struct {
	main, intra, inter *Group
	local, hosts       int
}

// NewHierarchy composes the hierarchy from the world's group and the two rings of this rank:
// intra (this host's local ranks, intra.Rank() the local rank) and inter (local rank i of every
// host, inter.Rank() the host). It checks that they fit: main.Size() = intra.Size()·inter.Size()
// and main.Rank() = inter.Rank()·intra.Size() + intra.Rank().
func NewHierarchy(main, intra, inter *Group) (*Hierarchy, error) {
	local, hosts := intra.Size(), inter.Size()
	if local*hosts != main.Size() {
		return nil, fmt.Errorf("allreduce: hierarchy: %d local ranks × %d hosts is not the world of %d", local, hosts, main.Size())
	}
	if want := hierRank(inter.Rank(), intra.Rank(), local); want != main.Rank() {
		return nil, fmt.Errorf("allreduce: hierarchy: rank %d is local rank %d of host %d, which is rank %d when ranks are numbered host by host",
			main.Rank(), intra.Rank(), inter.Rank(), want)
	}
	intra.nameRanks(intraMembers(inter.Rank(), local), main.Size())
	inter.nameRanks(interMembers(intra.Rank(), local, hosts), main.Size())
	return &Hierarchy{main: main, intra: intra, inter: inter, local: local, hosts: hosts}, nil
}

// OpenHierarchy joins this rank's two rings of a world of local ranks per host (LOCAL_WORLD_SIZE)
// and composes them with main (NewHierarchy). The rings are configured like base (the
// configuration main was made from) but for their rendezvous: a host's ring meets on loopback at
// a port its local rank 0 picks; local rank i's ring between hosts at a port global rank i (host
// 0's local rank i, on MASTER_ADDR's host) picks. The ports travel over main; so does each rank's
// host name, and ranks of one host that name different hosts are refused. The caller closes the
// Hierarchy (its rings), then main.
func OpenHierarchy(ctx context.Context, main *Group, base Config, local int) (*Hierarchy, error) {
	n, rank := main.Size(), main.Rank()
	if local < 1 || n%local != 0 {
		return nil, fmt.Errorf("allreduce: hierarchy: LOCAL_WORLD_SIZE %d does not divide the world of %d ranks", local, n)
	}
	hosts := n / local
	host, lr := hierHost(rank, local), hierLocal(rank, local)
	masterHost, _, err := net.SplitHostPort(base.MasterAddr)
	if err != nil && n > 1 {
		return nil, fmt.Errorf("allreduce: hierarchy: MASTER_ADDR %q: %w", base.MasterAddr, err)
	}
	name, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("allreduce: hierarchy: %w", err)
	}
	// This rank's offer: the intra ring's port (local rank 0), the inter ring's (host 0), its host name.
	offer := make([]byte, 8, 8+len(name))
	if lr == 0 && local > 1 {
		p, err := freePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint32(offer, uint32(p))
	}
	if host == 0 && hosts > 1 {
		p, err := freePort(masterHost)
		if err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint32(offer[4:], uint32(p))
	}
	offer = append(offer, name...)
	all, err := main.AllGather(ctx, offer)
	if err != nil {
		return nil, fmt.Errorf("allreduce: hierarchy: sharing the rings' ports: %w", err)
	}
	for r, b := range all {
		if len(b) < 8 {
			return nil, fmt.Errorf("allreduce: hierarchy: rank %d sent %d bytes, want at least 8", r, len(b))
		}
		if h0 := hierRank(hierHost(r, local), 0, local); string(b[8:]) != string(all[h0][8:]) {
			return nil, fmt.Errorf("allreduce: hierarchy: rank %d runs on %q but rank %d, local rank 0 of its host by LOCAL_WORLD_SIZE %d, on %q: ranks must be numbered host by host",
				r, b[8:], h0, local, all[h0][8:])
		}
	}
	log := base.Logger
	if log == nil {
		log = slog.Default()
	}
	ring := func(kind string, r, size int, addr string) (*Group, error) {
		cfg := base
		cfg.Rank, cfg.WorldSize, cfg.MasterAddr = r, size, addr
		cfg.Logger = log.With("ring", kind)
		g, err := NewGroup(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("allreduce: hierarchy: joining the ring %s: %w", kind, err)
		}
		return g, nil
	}
	intraPort := binary.LittleEndian.Uint32(all[hierRank(host, 0, local)])
	intra, err := ring(fmt.Sprintf("inside host %d", host), lr, local, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(intraPort))))
	if err != nil {
		return nil, err
	}
	interPort := binary.LittleEndian.Uint32(all[hierRank(0, lr, local)][4:])
	inter, err := ring(fmt.Sprintf("between hosts, local rank %d", lr), host, hosts, net.JoinHostPort(masterHost, strconv.Itoa(int(interPort))))
	if err != nil {
		intra.Close()
		return nil, err
	}
	h, err := NewHierarchy(main, intra, inter)
	if err != nil {
		intra.Close()
		inter.Close()
		return nil, err
	}
	return h, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("allreduce: hierarchy: finding a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Rank and Size are the world's.
func (h *Hierarchy) Rank() int { return h.main.Rank() }
func (h *Hierarchy) Size() int { return h.main.Size() }

// Local and Hosts are the shape: local ranks per host, hosts.
func (h *Hierarchy) Local() int { return h.local }
func (h *Hierarchy) Hosts() int { return h.hosts }

// AllReduce is Group.AllReduce's contract (buf's length, op and wire the same on every rank;
// afterwards every rank holds the same bits) over the hierarchy: the host's reduce-scatter, the
// ring between hosts on this local rank's share, the host's all-gather. The sums are added in
// another order than the flat ring's: equal to its result within f32 rounding (a 16-bit wire:
// within the wire's rounding per hop). Avg divides inside the host by the local ranks and between
// hosts by the hosts.
func (h *Hierarchy) AllReduce(ctx context.Context, buf []float32, op Op, wire Wire) error {
	if !wire.float() {
		return fmt.Errorf("allreduce: hierarchical all-reduce: unsupported wire %s", wire)
	}
	if err := h.intra.ReduceScatter(ctx, buf, op, wire); err != nil {
		return h.fail("reduce-scatter inside the host", err, h.inter)
	}
	lo, hi := hierShare(len(buf), h.local, h.intra.Rank())
	if err := h.inter.AllReduce(ctx, buf[lo:hi], op, wire); err != nil {
		return h.fail("all-reduce between hosts", err, h.intra)
	}
	if err := h.intra.AllGatherSegments(ctx, buf, wire); err != nil {
		return h.fail("all-gather inside the host", err, h.inter)
	}
	return nil
}

// fail breaks the other ring with the failure and says which stage failed.
func (h *Hierarchy) fail(stage string, err error, other *Group) error {
	if ce := (*CollectiveError)(nil); errors.As(err, &ce) {
		other.abortWith(ce)
	}
	return fmt.Errorf("allreduce: hierarchical all-reduce, %s: %w", stage, err)
}

// ReduceScatter, AllGatherSegments, BroadcastF32 and AllGather are main's.
func (h *Hierarchy) ReduceScatter(ctx context.Context, buf []float32, op Op, wire Wire) error {
	return h.main.ReduceScatter(ctx, buf, op, wire)
}

func (h *Hierarchy) AllGatherSegments(ctx context.Context, buf []float32, wire Wire) error {
	return h.main.AllGatherSegments(ctx, buf, wire)
}

func (h *Hierarchy) BroadcastF32(ctx context.Context, buf []float32, root int) error {
	return h.main.BroadcastF32(ctx, buf, root)
}

func (h *Hierarchy) AllGather(ctx context.Context, send []byte) ([][]byte, error) {
	return h.main.AllGather(ctx, send)
}

// GatherTo is main's, as AllGather is.
func (h *Hierarchy) GatherTo(ctx context.Context, send []byte, keep []bool) ([][]byte, error) {
	return h.main.GatherTo(ctx, send, keep)
}

// Close closes the two rings (not main, the caller's).
func (h *Hierarchy) Close() error {
	return errors.Join(h.intra.Close(), h.inter.Close())
}
