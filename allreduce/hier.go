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
	"sync"
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
	// This rank's offer: the intra ring's port (local rank 0), the inter ring's (host 0), its host
	// name. A port is held (listening) from the moment it is picked until the ring's rank 0
	// serves on it, so no other process can take it in between; a rank that cannot pick one
	// offers port 0 and every rank fails naming it, instead of the others waiting for a ring
	// that never forms.
	offer := make([]byte, 8, 8+len(name))
	var intraHeld, interHeld *heldPort
	defer func() { intraHeld.close(); interHeld.close() }()
	var mine error
	if lr == 0 && local > 1 {
		if intraHeld, err = holdPort("127.0.0.1", base.GRPCListen == nil); err != nil {
			mine = err
		} else {
			binary.LittleEndian.PutUint32(offer, uint32(intraHeld.port))
		}
	}
	if host == 0 && hosts > 1 && mine == nil {
		if interHeld, err = holdPort(masterHost, base.GRPCListen == nil); err != nil {
			mine = err
		} else {
			binary.LittleEndian.PutUint32(offer[4:], uint32(interHeld.port))
		}
	}
	offer = append(offer, name...)
	all, err := main.AllGather(ctx, offer)
	if mine != nil {
		return nil, mine
	}
	if err != nil {
		return nil, fmt.Errorf("allreduce: hierarchy: sharing the rings' ports: %w", err)
	}
	for r, b := range all {
		if len(b) < 8 {
			return nil, fmt.Errorf("allreduce: hierarchy: rank %d sent %d bytes, want at least 8", r, len(b))
		}
		if hierLocal(r, local) == 0 && local > 1 && binary.LittleEndian.Uint32(b) == 0 {
			return nil, fmt.Errorf("allreduce: hierarchy: rank %d could not pick a port for the ring inside its host", r)
		}
		if hierHost(r, local) == 0 && hosts > 1 && binary.LittleEndian.Uint32(b[4:]) == 0 {
			return nil, fmt.Errorf("allreduce: hierarchy: rank %d could not pick a port on %s for the ring between hosts of its local rank", r, masterHost)
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
	ring := func(kind string, r, size int, addr string, held *heldPort) (*Group, error) {
		cfg := base
		cfg.Rank, cfg.WorldSize, cfg.MasterAddr = r, size, addr
		cfg.Logger = log.With("ring", kind)
		if held != nil && held.lis != nil {
			cfg.GRPCListen = held.listen // the ring's rank 0 serves on the port it picked
		}
		g, err := NewGroup(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("allreduce: hierarchy: joining the ring %s: %w", kind, err)
		}
		return g, nil
	}
	intraPort := binary.LittleEndian.Uint32(all[hierRank(host, 0, local)])
	intra, err := ring(fmt.Sprintf("inside host %d", host), lr, local, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(intraPort))), intraHeld)
	if err != nil {
		return nil, err
	}
	interPort := binary.LittleEndian.Uint32(all[hierRank(0, lr, local)][4:])
	inter, err := ring(fmt.Sprintf("between hosts, local rank %d", lr), host, hosts, net.JoinHostPort(masterHost, strconv.Itoa(int(interPort))), interHeld)
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

// heldPort is a port picked for a ring's rank 0 and kept listening until the ring's group
// serves on it (listen hands the listener over), so that the port cannot be taken by another
// process between its choice and its use. Picked with net.Listen; where the configuration
// listens some other way (Config.GRPCListen: the in-memory tests), the port is only picked.
type heldPort struct {
	port int
	addr string
	mu   sync.Mutex
	lis  net.Listener // until handed over or closed
}

// holdPort picks a free port on host; hold keeps its listener open (else it is closed at once).
func holdPort(host string, hold bool) (*heldPort, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("allreduce: hierarchy: finding a free port on %s: %w", host, err)
	}
	h := &heldPort{port: l.Addr().(*net.TCPAddr).Port}
	h.addr = net.JoinHostPort(host, strconv.Itoa(h.port))
	if hold {
		h.lis = l
	} else {
		l.Close()
	}
	return h, nil
}

// listen is the ring's Config.GRPCListen: the held listener for the held address (once), a new
// listener for anything else (a Unix-domain twin, a data-plane port).
func (h *heldPort) listen(network, addr string) (net.Listener, error) {
	h.mu.Lock()
	l := h.lis
	if network == "tcp" && addr == h.addr {
		h.lis = nil
	} else {
		l = nil
	}
	h.mu.Unlock()
	if l != nil {
		return l, nil
	}
	return net.Listen(network, addr)
}

// close closes the listener if the ring never took it.
func (h *heldPort) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lis != nil {
		h.lis.Close()
		h.lis = nil
	}
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

// Inside and Between are this rank's two rings as process groups of their own, for a caller that
// composes the hierarchy itself: ddp's device path across hosts (issue 34) reduce-scatters and
// all-gathers inside the host on the device, over CUDA IPC, using Inside only as its control
// plane, and carries each local rank's share between hosts on Between. A collective that fails
// on one ring breaks the other too, naming the same rank, as AllReduce's stages do, so a rank
// waiting on its host's ring learns of a rank lost on another host, and the other way round.
func (h *Hierarchy) Inside() *HierRing {
	return &HierRing{g: h.intra, other: h.inter, name: "inside the host"}
}
func (h *Hierarchy) Between() *HierRing {
	return &HierRing{g: h.inter, other: h.intra, name: "between hosts"}
}

// HierRing is one ring of a Hierarchy (Inside, Between): the Group's collectives, each of
// whose failures breaks the hierarchy's other ring with the same error. Rank and Size are the
// ring's own (the local rank and the local ranks inside; the host and the hosts between); its
// errors name peers by their rank in the world.
type HierRing struct {
	g, other *Group
	name     string
}

func (r *HierRing) Rank() int { return r.g.Rank() }
func (r *HierRing) Size() int { return r.g.Size() }

// linked passes err on after breaking the other ring with it (a CollectiveError: a peer failed
// or aborted; a caller's cancelled context breaks nothing).
func (r *HierRing) linked(what string, err error) error {
	if err == nil {
		return nil
	}
	if ce := (*CollectiveError)(nil); errors.As(err, &ce) {
		r.other.abortWith(ce)
	}
	return fmt.Errorf("allreduce: %s of the ring %s: %w", what, r.name, err)
}

func (r *HierRing) AllReduce(ctx context.Context, buf []float32, op Op, wire Wire) error {
	return r.linked("all-reduce", r.g.AllReduce(ctx, buf, op, wire))
}

func (r *HierRing) AllReduceF16(ctx context.Context, buf []uint16, op Op) error {
	return r.linked("all-reduce (f16)", r.g.AllReduceF16(ctx, buf, op))
}

func (r *HierRing) AllReduceBF16(ctx context.Context, buf []uint16, op Op) error {
	return r.linked("all-reduce (bf16)", r.g.AllReduceBF16(ctx, buf, op))
}

func (r *HierRing) ReduceScatter(ctx context.Context, buf []float32, op Op, wire Wire) error {
	return r.linked("reduce-scatter", r.g.ReduceScatter(ctx, buf, op, wire))
}

func (r *HierRing) AllGatherSegments(ctx context.Context, buf []float32, wire Wire) error {
	return r.linked("all-gather", r.g.AllGatherSegments(ctx, buf, wire))
}

func (r *HierRing) BroadcastF32(ctx context.Context, buf []float32, root int) error {
	return r.linked("broadcast", r.g.BroadcastF32(ctx, buf, root))
}

func (r *HierRing) AllGather(ctx context.Context, send []byte) ([][]byte, error) {
	out, err := r.g.AllGather(ctx, send)
	return out, r.linked("all-gather", err)
}

func (r *HierRing) GatherTo(ctx context.Context, send []byte, keep []bool) ([][]byte, error) {
	out, err := r.g.GatherTo(ctx, send, keep)
	return out, r.linked("gather", err)
}
