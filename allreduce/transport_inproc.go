package allreduce

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/goddp/allreduce/link"
)

// InprocNetwork connects n in-process transports with bounded channels: the same contract as
// gRPC (ordered, back-pressured, links that break), no sockets. Tests build a group per rank
// from NewInprocNetwork(n).Transport(rank).
type InprocNetwork struct {
	n     int
	links [][]*inprocLink // links[from][to]
	eps   []*inprocTransport
}

// inprocDepth is how many messages a link buffers before Send blocks (like a flow-control window).
const inprocDepth = 4

type inprocLink struct {
	q    chan []byte // messages in flight
	free chan []byte // buffers handed back by the receiver, reused by the sender
}

// NewInprocNetwork makes a network of n ranks.
func NewInprocNetwork(n int) *InprocNetwork {
	nw := &InprocNetwork{n: n, links: make([][]*inprocLink, n), eps: make([]*inprocTransport, n)}
	for i := range nw.links {
		nw.links[i] = make([]*inprocLink, n)
		for j := range nw.links[i] {
			nw.links[i][j] = &inprocLink{q: make(chan []byte, inprocDepth), free: make(chan []byte, inprocDepth+2)}
		}
	}
	for i := range nw.eps {
		nw.eps[i] = &inprocTransport{nw: nw, rank: i, closed: make(chan struct{}), last: make([][]byte, n)}
	}
	return nw
}

// Transport returns rank's endpoint.
func (nw *InprocNetwork) Transport(rank int) link.Transport { return nw.eps[rank] }

// Kill closes rank's endpoint as if its process died: no goodbye, links to it break.
func (nw *InprocNetwork) Kill(rank int) { nw.eps[rank].Close() }

type inprocTransport struct {
	nw        *InprocNetwork
	rank      int
	closeOnce sync.Once
	closed    chan struct{}
	last      [][]byte // last[from]: buffer returned by the previous Recv, recycled by the next
}

var _ link.Transport = (*inprocTransport)(nil)

func (t *inprocTransport) Send(ctx context.Context, to int, p link.Payload) error {
	if to < 0 || to >= t.nw.n || to == t.rank {
		return fmt.Errorf("allreduce: inproc send to invalid rank %d", to)
	}
	select {
	case <-t.closed:
		return link.ErrClosed
	default:
	}
	l := t.nw.links[t.rank][to]
	n := p.Size()
	var b []byte
	select {
	case b = <-l.free:
	default:
	}
	if cap(b) < n {
		b = make([]byte, n)
	}
	b = b[:n]
	p.Encode(b)
	peer := t.nw.eps[to]
	select {
	case l.q <- b:
		return nil
	case <-peer.closed:
		return &link.PeerError{Rank: to, Err: link.ErrPeerGone}
	case <-t.closed:
		return link.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (t *inprocTransport) Recv(ctx context.Context, from int) ([]byte, error) {
	if from < 0 || from >= t.nw.n || from == t.rank {
		return nil, fmt.Errorf("allreduce: inproc recv from invalid rank %d", from)
	}
	l := t.nw.links[from][t.rank]
	if b := t.last[from]; b != nil {
		t.last[from] = nil
		select {
		case l.free <- b:
		default:
		}
	}
	peer := t.nw.eps[from]
	var b []byte
	select {
	case b = <-l.q:
	default:
		select {
		case b = <-l.q:
		case <-peer.closed:
			select { // deliver what was sent before the peer went away
			case b = <-l.q:
			default:
				return nil, &link.PeerError{Rank: from, Err: link.ErrPeerGone}
			}
		case <-t.closed:
			return nil, link.ErrClosed
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	t.last[from] = b
	return b, nil
}

func (t *inprocTransport) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return nil
}
