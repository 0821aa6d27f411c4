// Package grpcnet is the gRPC data plane, the default (Config.TransportKind "grpc"): every rank
// serves the Ring service, whose Push streams carry the frames one rank sends another and whose
// Join, on rank 0, is the rendezvous (transport.go); the buffers it sends from and reads into,
// DATA payloads read in place (conn.go); and the raw-bytes codec (codec.go). New builds one;
// the core wraps it in the shared-memory decorator. Every connection passes package auth's
// handshake before gRPC reads a byte of it.
//
// It imports only link and auth of goddp.
package grpcnet
