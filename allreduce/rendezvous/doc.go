// Package rendezvous owns how the ranks of a group learn each other's addresses: rank 0's Join
// handler and wait, the other ranks' call (rendezvous.go), the table of who joined, a core with
// no I/O (table.go), and for a plane without a gRPC server of its own, rank 0's Join server.
//
// A data plane takes part through link.Rendezvous: the core hands it Maker(cfg, log), a
// link.NewRendezvous, and the plane calls it once it knows the address it announces; the gRPC
// plane serves Join on its own server and hands the calls to ServeJoin, the tcp plane asks for
// a Join server of the rendezvous's own.
//
// It imports only link and auth of goddp.
package rendezvous
