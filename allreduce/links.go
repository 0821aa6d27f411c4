package allreduce

import "sync"

// outLink (gRPC) and tcpOut (raw sockets) are a data plane's link to one peer; both planes keep
// them in a table by rank, made on first use and kept for the group's life, failed ones too (a
// PeerError is sticky). openLink is that table's one rule, for both.

// linkErr is what openLink needs of a link: why it failed, or nil.
type linkErr interface{ failed() error }

func (l *outLink) failed() error { return l.err }
func (l *tcpOut) failed() error  { return l.err }

// openLink returns table[to], opening it with open when there is none yet; under mu, so one
// link per peer is ever opened. open's keep false leaves nothing in the table (a dial cut short
// by this rank's own cancelled collective says nothing about the peer: the next Send dials
// afresh). A closed transport (closed is closed) opens nothing: ErrClosed.
func openLink[L linkErr](mu *sync.Mutex, table []L, closed <-chan struct{}, to int, open func() (l L, keep bool, err error)) (L, error) {
	mu.Lock()
	defer mu.Unlock()
	var none L
	select {
	case <-closed:
		return none, ErrClosed
	default:
	}
	if l := table[to]; any(l) != any(none) {
		return l, l.failed()
	}
	l, keep, err := open()
	if !keep {
		return none, err
	}
	table[to] = l
	return l, l.failed()
}
