// Package tcpnet is the raw-socket data plane (Config.TransportKind "tcp" and "tcp-inet"): one
// socket per ordered pair of ring neighbours, each message a 4-byte length and the frame,
// Unix-domain sockets to peers on loopback (transport.go). The length prefix is this plane's
// framing of a message; the frame inside is opaque to it. Its rendezvous is the gRPC one
// (package rendezvous, with a Join server of its own on rank 0), and every connection passes
// package auth's handshake. New builds one; the core wraps it in the shared-memory decorator.
//
// It imports only link and auth of goddp.
package tcpnet
