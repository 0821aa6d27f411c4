package grpcnet

import "github.com/goddp/goddp/allreduce/link"

// Internals for grpcnet's external tests (transport_test.go), which run whole groups over the
// plane and so import the core, which imports this package.

// Plane is the data plane under the shared-memory decorator's tr (shm.Inner's result).
func Plane(tr link.Transport) *Transport { return tr.(*Transport) }

func (t *Transport) HasUnixListener() bool { return t.ux != nil }
func (t *Transport) ListenAddr() string    { return t.lis.Addr().String() }
func (t *Transport) Config() link.Config   { return t.cfg }

// UnixOut lists the peers whose outgoing link is a Unix-domain socket.
func (t *Transport) UnixOut() []int {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	var to []int
	for r, l := range t.out {
		if l != nil && l.unix.Load() {
			to = append(to, r)
		}
	}
	return to
}

// RxCounts are the server's receive-buffer counters: payloads read in place, payloads copied,
// slabs allocated.
func (t *Transport) RxCounts() (aliased, copied, slabs int64) {
	return t.rx.aliased.Load(), t.rx.copied.Load(), t.rx.slabs.Load()
}

const RxSlabsSpare = rxSlabsSpare

// The Push method's pieces, for a client that skips the handshake.
var (
	RawCodec       = rawCodec{}
	PushStreamDesc = &pushStreamDesc
)

// PushMsg is what SendMsg on a Push stream takes: b as a message.
func PushMsg(b []byte) any { return &outMsg{p: link.Bytes(b)} }

// HasLink says whether the link to peer to is in the table (opened, or failed for good).
func (t *Transport) HasLink(to int) bool {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	return t.out[to] != nil
}
