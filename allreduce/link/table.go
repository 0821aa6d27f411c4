package link

import "sync"

// A data plane keeps its links to peers (a gRPC stream, a socket) in a table by rank, made on
// first use and kept for the group's life, failed ones too (a PeerError is sticky). OpenLink is
// that table's one rule, for every plane.

// Failer is what OpenLink needs of a link: why it failed, or nil.
type Failer interface{ Failed() error }

// OpenLink returns table[to], opening it with open when there is none yet; under mu, so one
// link per peer is ever opened. open's keep false leaves nothing in the table (a dial cut short
// by this rank's own cancelled collective says nothing about the peer: the next Send dials
// afresh). A closed transport (closed is closed) opens nothing: ErrClosed.
func OpenLink[L Failer](mu *sync.Mutex, table []L, closed <-chan struct{}, to int, open func() (l L, keep bool, err error)) (L, error) {
	mu.Lock()
	defer mu.Unlock()
	var none L
	select {
	case <-closed:
		return none, ErrClosed
	default:
	}
	if l := table[to]; any(l) != any(none) {
		return l, l.Failed()
	}
	l, keep, err := open()
	if !keep {
		return none, err
	}
	table[to] = l
	return l, l.Failed()
}
