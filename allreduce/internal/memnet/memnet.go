// Package memnet is an in-memory network for tests that are about a protocol and not its
// sockets: listeners and dials by address, each connection a
// google.golang.org/grpc/test/bufconn pipe. Its Listen and Dial go in link.Config's GRPCListen
// and GRPCDial. It imports nothing of goddp.
package memnet

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"

	"google.golang.org/grpc/test/bufconn"
)

// bufSize is each connection's buffer, each way.
const bufSize = 1 << 20

// Net is one in-memory network; the zero value is not usable, New makes one.
type Net struct {
	mu   sync.Mutex
	lis  map[string]*listener
	port int // the last port given for a listen on port 0
}

// New returns an empty network.
func New() *Net { return &Net{lis: map[string]*listener{}, port: 40000} }

type listener struct {
	*bufconn.Listener
	addr *net.TCPAddr
	once sync.Once
	drop func()
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) Close() error {
	l.once.Do(l.drop)
	return l.Listener.Close()
}

// Listen listens at addr ("tcp" only: other networks fail, so a Unix-domain twin is never
// made); port 0 takes a free port of the network's own. Its Addr is the address listened at.
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	if network != "tcp" {
		return nil, fmt.Errorf("memnet: no %s network", network)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" {
		for n.lis[net.JoinHostPort(host, strconv.Itoa(n.port))] != nil {
			n.port++
		}
		addr = net.JoinHostPort(host, strconv.Itoa(n.port))
	}
	if n.lis[addr] != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: syscall.EADDRINUSE}
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &listener{Listener: bufconn.Listen(bufSize), addr: ta}
	l.drop = func() {
		n.mu.Lock()
		delete(n.lis, addr)
		n.mu.Unlock()
	}
	n.lis[addr] = l
	return l, nil
}

// Dial connects to the listener at addr ("tcp" only), as a refused connection when there is
// none.
func (n *Net) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if network != "tcp" {
		return nil, fmt.Errorf("memnet: no %s network", network)
	}
	n.mu.Lock()
	l := n.lis[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return l.DialContext(ctx)
}
