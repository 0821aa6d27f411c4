// Package allreduce is goddp's communication engine: process groups and the collectives the
// data-parallel trainer exchanges gradients through — ring all-reduce (sum, average) with an
// f32, f16 or bf16 wire, its two halves reduce-scatter and all-gather as collectives of their own,
// broadcast, all-gather of blocks (GatherTo: one whose blocks only some ranks keep, the others
// passing them on) and barrier — over pluggable transports. It knows buffers and ranks, never
// models.
//
// # The layout
//
// This package is the core: Group, the ring schedule (ring.go, pure functions), frames
// (frame.go), the sender (sender.go), the f32/f16/bf16 codecs and kernels (codec_f16.go,
// codec_bf16.go: Wire.kernels, one path for both 16-bit wires), the
// collectives (allreduce.go, collectives.go), the hierarchical all-reduce of hosts × local ranks
// (hier_schedule.go, pure functions; hier.go, Hierarchy over three groups), averaging (Avg and AvgScale: its one owner; the
// staged GPU path in ddp scales by AvgScale before its cast), the environment (config_env.go,
// the only place any package under allreduce/ reads it) and the in-process transport for tests
// (transport_inproc.go). Around it:
//
//   - link: the contract — Transport, Payload, PeerError, the group's Config (Config here is
//     an alias of link.Config), the optional abilities Aborter and MemoryReleaser, the
//     shared-memory decorator's Linker, the rendezvous as a plane sees it. Imports nothing of goddp.
//   - auth: the token handshake and its listener, gRPC dialler and interceptors.
//   - rendezvous: how ranks learn each other's addresses (rank 0's Join).
//   - grpcnet, tcpnet: the data planes (gRPC streams; raw sockets).
//   - shm: the shared-memory decorator over either plane.
//
// Each of those imports link (and auth) only, never the core; the core imports them to build
// the default transport when Config.Transport is nil (NewTransport), as memberlist builds its
// NetTransport. Nothing under allreduce/ imports anything of model but model/half.
// imports_test.go holds these rules.
//
// # The flow
//
//  1. Form the group. NewGroup(ctx, cfg), cfg usually from ConfigFromEnv (RANK, WORLD_SIZE,
//     MASTER_ADDR, MASTER_PORT, DDP_TOKEN, as torchrun and ddplaunch set them; every knob is
//     a Config field). With Config.Transport nil it builds the transport Config.TransportKind
//     names (NewTransport): the plane starts listening and takes part in the rendezvous
//     (package rendezvous) — rank 0 serves Join at MASTER_ADDR:MASTER_PORT, each other rank
//     calls it with its own address, and when all have joined everyone gets the full table.
//     The gRPC plane's server hosts Join; the tcp kind's rank 0 a gRPC server with Join alone.
//     Every connection, of either data plane, starts with a handshake in which both ends prove
//     the shared token without sending it (package auth); a peer that cannot is refused before
//     anything else of it is read, and the refusal is logged. A one-rank world opens nothing
//     and every collective returns at once.
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
//     at once, while a sender goroutine (sender.go) casts queued chunks straight into the
//     transport's buffers and sends them. With the f16 (bf16) wire each hop rounds the partial
//     sum to half (bfloat16); the segment's owner rounds the full sum and keeps exactly what it
//     sends, so every rank ends bit-identical. Avg multiplies each contribution by AvgScale
//     before the cast (f16, bf16) or divides the full sum once (f32). ReduceScatter and AllGatherSegments run the
//     two halves as collectives of their own, each rank owning Segment(n, size, rank) in
//     between; one after the other they equal AllReduce bit for bit, which runs them fused.
//
//  4. Failures. A frame that does not arrive within Config.Timeout (an idle sender sends
//     keepalives, so only a dead or stuck rank goes quiet), a broken stream, a malformed frame
//     or a mismatch fails the collective with a *CollectiveError naming the peer and step.
//     The group is then broken: the failing rank sends an abort frame along the ring, so the
//     other ranks' pending collectives fail too, naming the same peer, and every later call
//     returns the error.
//
//  5. Close. Group.Close closes the transport (streams, connections, server; a transport that
//     is a link.Aborter is aborted when a collective is still running) and waits for an
//     in-flight collective to unwind; then a link.MemoryReleaser frees its shared memory. No
//     goroutine or connection survives it. It is idempotent.
//
// NewInprocNetwork gives in-memory transports for tests, with Kill to simulate a dead
// process. gRPC is the default data plane. Config.TransportKind "tcp" (DDP_TRANSPORT=tcp)
// keeps the gRPC rendezvous and token but moves frames over raw sockets (package tcpnet):
// length-prefixed frames, the same handshake per connection, Unix-domain sockets to peers on
// loopback; it needs far less CPU per byte than gRPC where bytes cross a socket
// (docs/perf-allreduce.md).
//
// Both data planes are wrapped by the shared-memory decorator (package shm): every link starts
// with its hello; on a link to a peer on this host it offers a shared-memory ring (a sealed
// memfd, opened by the peer through /proc/PID/fd), and from then on the frames are records in
// the ring, which the receiver reads in place and sleeps on with a futex; the link still
// authenticates, fails and ends. A data plane offers what the decorator needs through
// link.Linker. Every group test runs over inproc, grpc, grpc-noshm, tcp and tcp-inet; the
// planes' own tests build groups through internal/grouptest; tests about a protocol rather
// than its sockets (the handshake's refusals, TLS) run the gRPC plane and the rendezvous on an
// in-memory network (internal/memnet over bufconn, Config.GRPCListen and GRPCDial).
package allreduce
