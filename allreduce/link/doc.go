// Package link is the contract between allreduce's core and its data planes: what a plane
// implements and what it is given, so that a plane needs nothing of the core.
//
// It owns Transport and Payload (how framed messages move between ranks, with the contract at
// the top of Transport), PeerError, ErrClosed and ErrPeerGone (how a link fails), the group's
// Config with its defaults and WithDefaults (every knob of every plane; allreduce.Config is
// this type), the transport kinds, the named optional abilities a transport may have (Aborter:
// end at once; MemoryReleaser: free memory a Recv's slice may alias; Linker: what the
// shared-memory decorator needs of a plane), the rendezvous as a plane takes part in it
// (Rendezvous, NewRendezvous, Table, and ServiceName, the gRPC service on the wire), and the
// one rule of a plane's table of links (OpenLink).
//
// Frames: the layout of a frame's header is the core's (allreduce's frame.go); a plane moves
// frames as opaque messages and needs only their bounds, which live here (FrameHeaderSize,
// MaxFramePayload, MaxMessage). The tcp plane's length prefix is its own framing of a message,
// not the frame's, and abort frames are frames like any other to a plane.
//
// It imports nothing of goddp.
package link
