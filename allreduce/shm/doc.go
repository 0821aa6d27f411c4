// Package shm is the shared-memory decorator, in the way of memberlist's wrapped transports:
// Wrap takes any data plane that offers link.Linker and moves the frames of its same-host links
// through shared-memory rings (shm.go says how a link offers, opens and uses one; ring.go is
// the ring itself; ring_linux.go its memfd and futex), while the plane's link still
// authenticates, fails and ends. A transport without link.Linker is returned as it is.
//
// It imports only link of goddp.
package shm
