// Package auth owns the handshake every connection into a rank starts with — gRPC or raw
// socket, TCP or Unix domain, rendezvous or data link — in which both sides prove the group's
// token without sending it (auth.go says how, byte by byte), and its use on every side: Dial
// and Accept/Reply for a plane's own accept loop, NewListener for a gRPC server (Accept
// returns only connections that completed it), the gRPC server's interceptors and the rank
// they find (Interceptors, Rank, StreamRank), and the dialler of a group's gRPC servers with
// the names of their Unix-domain twins (DialGRPC, DialConn, ListenUnix, GRPCUnixName; grpc.go).
//
// The gRPC data plane (grpcnet), the raw-socket plane (tcpnet) and the rendezvous import it.
// It imports only link of goddp.
package auth
