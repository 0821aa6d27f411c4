package tcpnet

import (
	"context"

	"github.com/goddp/goddp/allreduce/link"
)

// Internals for tcpnet's external tests (transport_test.go), which run whole groups over the
// plane and so import the core, which imports this package.

// UnixName is the abstract Unix socket of the rank whose data plane is at addr.
var UnixName = unixName

// Addrs are every rank's data-plane addresses, from the rendezvous.
func (t *Transport) Addrs() []string { return t.addrs }

// DialAs dials rank to's data plane at addrs[to] as a rank cfg describes (any token, any
// rank) and runs the handshake, as a Send's first dial does.
func DialAs(cfg link.Config, addrs []string, to int) error {
	t := &Transport{cfg: cfg, addrs: addrs}
	c, err := t.dial(context.Background(), to)
	if err == nil {
		c.Close()
	}
	return err
}

// DialAsContext is DialAs with the dial's context.
func DialAsContext(ctx context.Context, cfg link.Config, addrs []string, to int) error {
	t := &Transport{cfg: cfg, addrs: addrs}
	c, err := t.dial(ctx, to)
	if err == nil {
		c.Close()
	}
	return err
}
