package rendezvous

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// table is rank 0's rendezvous table as a core with no I/O, in the way of etcd's raft: no
// clock, no network, no goroutine, no lock. rendezvous.go feeds it the Join requests it
// receives, with the rank the connection's handshake proved and the host the request came from,
// and asks it when the table is complete and what to answer. Tests drive it by hand
// (rendezvous_state_test.go). Thread-unsafe: its owner holds a mutex.
//
// The rules:
//
//  1. A request names a rank 1..world-1 of the same world, and the rank its connection proved
//     (package auth): a rank cannot join for another.
//  2. Every rank of a group uses one transport kind: with the tcp kind each announces a data
//     port, with grpc none; a rank whose request differs from rank 0 in this is refused.
//  3. An address with an unspecified host ("", 0.0.0.0, ::) takes the host the request came from.
//  4. A rank may join again with the same address (a retried call); another address is refused.
//  5. The table is complete when every rank has joined; the answer is then every rank's address
//     and, for the tcp kind, every rank's data-plane address (the host of its address, its port).
type table struct {
	world int
	data  bool           // ranks announce data ports (the tcp kind)
	addrs map[int]string // by rank
	ports map[int]int    // data-plane ports, by rank (the tcp kind)
}

// Why a join is refused; rendezvous.go maps them to gRPC status codes.
var (
	errJoinInvalid = errors.New("allreduce: bad join request")
	errJoinTwice   = errors.New("allreduce: rank already joined")
	errJoinKind    = errors.New("allreduce: another transport kind (DDP_TRANSPORT must match)")
)

// newTable is rank 0's table, holding rank 0 itself: its address (MasterAddr) and, for the
// tcp kind, its data-plane port (0: the grpc kind, no data ports).
func newTable(world int, addr string, dataPort int) *table {
	t := &table{world: world, data: dataPort > 0, addrs: map[int]string{0: addr}, ports: map[int]int{}}
	if t.data {
		t.ports[0] = dataPort
	}
	return t
}

// join records req, sent over a connection that proved rank from and came from host seen ("" if
// unknown). It returns the address recorded, or why the request is refused.
func (t *table) join(from int, req joinRequest, seen string) (string, error) {
	if req.World != t.world || req.Rank <= 0 || req.Rank >= t.world {
		return "", fmt.Errorf("%w: rank %d of world %d cannot join a world of %d", errJoinInvalid, req.Rank, req.World, t.world)
	}
	if from != req.Rank {
		return "", fmt.Errorf("%w: a connection of rank %d asks to join as rank %d", errJoinInvalid, from, req.Rank)
	}
	if (req.DataPort > 0) != t.data {
		return "", fmt.Errorf("%w: rank %d uses another transport kind than rank 0", errJoinKind, req.Rank)
	}
	if req.DataPort < 0 || req.DataPort > 65535 {
		return "", fmt.Errorf("%w: data port %d", errJoinInvalid, req.DataPort)
	}
	host, port, err := net.SplitHostPort(req.Addr)
	if err != nil {
		return "", fmt.Errorf("%w: address %q: %v", errJoinInvalid, req.Addr, err)
	}
	addr := req.Addr
	if ip := net.ParseIP(host); (host == "" || (ip != nil && ip.IsUnspecified())) && seen != "" {
		addr = net.JoinHostPort(seen, port)
	}
	if old, dup := t.addrs[req.Rank]; dup && old != addr {
		return "", fmt.Errorf("%w: rank %d already joined from %s", errJoinTwice, req.Rank, old)
	}
	t.addrs[req.Rank] = addr
	if t.data {
		t.ports[req.Rank] = req.DataPort
	}
	return addr, nil
}

// complete says whether every rank has joined.
func (t *table) complete() bool { return len(t.addrs) == t.world }

// missing lists the ranks that have not joined, in order.
func (t *table) missing() []int {
	var m []int
	for r := range t.world {
		if _, ok := t.addrs[r]; !ok {
			m = append(m, r)
		}
	}
	return slices.Clip(m)
}

// answer is what every rank learns once the table is complete.
func (t *table) answer() joinResponse {
	resp := joinResponse{Addrs: make([]string, t.world)}
	for r, a := range t.addrs {
		resp.Addrs[r] = a
	}
	if t.data {
		resp.Data = make([]string, t.world)
		for r, a := range resp.Addrs {
			host, _, _ := net.SplitHostPort(a)
			resp.Data[r] = net.JoinHostPort(host, strconv.Itoa(t.ports[r]))
		}
	}
	return resp
}

// joinRequest and joinResponse are the rendezvous messages (JSON).
// WARNING: ONLY ADD FIELDS. Ranks of different builds must still tell each other apart.
type joinRequest struct {
	Rank     int    `json:"rank"`
	World    int    `json:"world"`
	Addr     string `json:"addr"`
	DataPort int    `json:"data_port,omitempty"` // tcp kind: data plane on Addr's host
}

type joinResponse struct {
	Addrs []string `json:"addrs"`
	Data  []string `json:"data,omitempty"` // tcp kind: every rank's data-plane address
}
