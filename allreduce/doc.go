// Package allreduce is goddp's communication engine: process groups and the collectives the
// data-parallel trainer exchanges gradients through — ring all-reduce (sum, average) with an
// f32 or f16 wire, broadcast, all-gather and barrier — over gRPC streams between ring
// neighbours (or raw sockets, TransportKind tcp), or over an in-process transport in tests.
// Between ranks of one host the bytes go through shared-memory rings set up over the link by a
// decorator that wraps either data plane (shm.go). It knows buffers and ranks, never models.
//
// # The flow
//
//  1. Form the group. NewGroup(ctx, cfg), cfg usually from ConfigFromEnv (RANK, WORLD_SIZE,
//     MASTER_ADDR, MASTER_PORT, DDP_TOKEN, as torchrun and ddplaunch set them; config_env.go
//     is the only place the package reads the environment, and every knob is a Config
//     field). Rank 0 serves the rendezvous at MASTER_ADDR:MASTER_PORT: each other rank calls
//     Join with its own address, and when all have joined everyone gets the full table
//     (rendezvous.go; the table itself is table, a core with no I/O, rendezvous_state.go).
//     The gRPC data plane's server hosts Join; the tcp kind's rank 0 a gRPC server with Join
//     alone. Every connection, of either data
//     plane, starts with a handshake in which both ends prove the shared token without sending
//     it (auth.go); a peer that cannot is refused before anything else of it is read, and the
//     refusal is logged. A one-rank world opens nothing and every collective returns at once.
//
//  2. Run collectives, the same ones in the same order on every rank. Each is numbered (the
//     "step" in errors) and cut into frames (frame.go): a 40-byte header — kind, wire, op,
//     step, element count, chunk offset and length — then the payload. The receiver checks
//     every header against what it expects, so mismatched sizes, wire formats or collectives
//     fail with an error instead of producing garbage or hanging.
//
//  3. All-reduce is reduce-scatter then all-gather around the ring (ring.go: which segment
//     goes where at each step, as pure functions). Each rank's segment is cut into chunks of
//     Config.ChunkBytes; the caller's goroutine receives a chunk, adds its own values
//     (float32, kernels in codec_f16.go, F16C/AVX on amd64) and queues it for the next step
//     at once, while a sender goroutine (sender.go) casts queued chunks straight into gRPC's
//     buffers and sends them. With the f16 wire each hop rounds the partial sum to half; the
//     segment's owner rounds the full sum and keeps exactly what it sends, so every rank ends
//     bit-identical. Avg divides each contribution before the cast (f16) or the full sum
//     once (f32).
//
//  4. Failures. A frame that does not arrive within Config.Timeout (an idle sender sends
//     keepalives, so only a dead or stuck rank goes quiet), a broken stream, a malformed frame
//     or a mismatch fails the collective with a *CollectiveError naming the peer and step.
//     The group is then broken: the failing rank sends an abort frame along the ring, so the
//     other ranks' pending collectives fail too, naming the same peer, and every later call
//     returns the error.
//
//  5. Close. Group.Close closes the transport (streams, connections, server) and waits for an
//     in-flight collective to unwind; no goroutine or connection survives it. It is idempotent.
//
// Transports implement the small Transport interface (transport.go); NewInprocNetwork gives
// in-memory ones for tests, with Kill to simulate a dead process. gRPC is the default data
// plane. Config.TransportKind "tcp" (DDP_TRANSPORT=tcp) keeps the gRPC rendezvous and token but
// moves frames over raw sockets (transport_tcp.go): length-prefixed frames, the same handshake
// per connection, Unix-domain sockets to peers on loopback; it needs far less CPU per byte
// than gRPC where bytes cross a socket (docs/perf-allreduce.md).
//
// Both data planes are wrapped, in the way of memberlist's wrapped transports, by Transport
// (shm.go): every link starts with its hello; on a link to a peer on this host it offers a
// shared-memory ring (a sealed memfd, opened by the peer through /proc/PID/fd), and from then
// on the frames are records in the ring (shm_ring.go), which the receiver reads in place and
// sleeps on with a futex; the link still authenticates, fails and ends. A data plane offers
// what the decorator needs through the small link.Linker interface. Every group test runs over
// inproc, grpc, grpc-noshm, tcp and tcp-inet.
package allreduce
