package link

import "context"

// ServiceName is the gRPC service of the group's servers, on the wire: the rendezvous's Join
// (package rendezvous) and the gRPC data plane's Push (package grpcnet), beside each other on
// rank 0's server at MasterAddr.
const ServiceName = "goddp.allreduce.Ring"

// Rendezvous is one rank's side of the group's rendezvous, in which the ranks learn each
// other's addresses (package rendezvous implements it; the core hands a data plane a
// NewRendezvous, and the plane calls it once it knows the address it announces).
//
// Contract:
//   - Run takes part within Config.RendezvousTimeout (and ctx): rank 0 waits until every rank
//     has joined, the others join rank 0 at Config.MasterAddr. On rank 0 a Join server must be
//     serving: the rendezvous's own (NewRendezvous's serve) or the plane's, which hands every
//     Join call to ServeJoin.
//   - ServeJoin is rank 0's Join handler, for a plane whose gRPC server hosts Join. ctx is the
//     call's: it carries the caller's peer address (gRPC's peer) and the rank its connection's
//     handshake proved (auth's interceptors). body and the answer are the method's messages.
//   - Close ends pending Join handlers and the rendezvous's own server; idempotent.
type Rendezvous interface {
	Run(ctx context.Context) (Table, error)
	ServeJoin(ctx context.Context, body []byte) ([]byte, error)
	Close()
}

// Table is what the rendezvous tells every rank: each rank's address and, when the ranks
// announced data ports, each rank's data-plane address.
type Table struct {
	Addrs, Data []string
}

// NewRendezvous prepares this rank's side of the rendezvous: it will announce addr (rank 0:
// MasterAddr) and dataPort (a plane whose frames do not travel on the gRPC server at addr; 0
// otherwise). With serve, rank 0 also starts a gRPC server of its own at MasterAddr that serves
// Join alone (for a plane without a gRPC server).
type NewRendezvous func(addr string, dataPort int, serve bool) (Rendezvous, error)
