package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/goddp/goddp/allreduce/link"
)

// The connection handshake. Every connection into a rank — gRPC or raw socket, TCP or Unix
// domain, rendezvous or data link — starts with it, before gRPC or the data plane reads a single
// byte of its own, so a peer that cannot prove the group's token costs the listener a few
// hundred bytes and learns nothing:
//
//	dialer   → listener: "GDDPAUT1" | plane u8 | rank u16 | world u16 | nonce_d [32]    (hello)
//	listener → dialer:   nonce_l [32] | HMAC(key, "listener" | hello | nonce_l)
//	dialer   → listener: HMAC(key, "dialer" | hello | nonce_l)
//	listener → dialer:   status u8 | reason length u16 | reason
//
// key is SHA-256 of the token. Neither side ever sends the token, and the dialer checks the
// listener's proof before it sends its own (when the listener's is wrong it sends zeros instead,
// so that a real listener of another job logs the refusal): a local process that took a rank's
// Unix-socket name (or port) first gets a hello with a random nonce and zeros, nothing it could
// replay, since a real listener draws its own nonce. After a good proof the listener checks the claimed rank and world (the
// MAC covers them) and answers a status; a refusal carries its reason to the dialer, which
// returns it as an error naming the peer.
//
// listener runs the listener's side for the gRPC server: Accept returns only connections
// that completed it; what unauthenticated connections may hold meanwhile, and how refusals are
// logged, is Guard's (guard.go). The tcp transport runs Accept in its own accept loop, with a
// Guard of its own.

const (
	magic      = "GDDPAUT1"
	helloSize  = len(magic) + 1 + 2 + 2 + nonceSize
	nonceSize  = 32
	macSize    = sha256.Size
	maxReason  = 1024
	MaxPending = 64               // concurrent unauthenticated connections a listener serves (guard.go)
	Deadline   = 10 * time.Second // bound on one handshake (its hello: HelloDeadline)
	statusOK   = 0
	statusNo   = 1

	PlaneGRPC byte = 'g' // connections of the gRPC server (rendezvous and Push streams)
	PlaneTCP  byte = 't' // raw-socket data links (package tcpnet)
)

var (
	// ErrListener: the listening side did not prove the token (another job, or a squatter).
	ErrListener = errors.New("the listener did not prove the group token (DDP_TOKEN): another job, or a local process holding the peer's address")
	// ErrDialer: the dialling side did not prove the token.
	ErrDialer = errors.New("wrong or missing token (DDP_TOKEN)")
	ErrMagic  = errors.New("not a goddp connection")
	ErrPlane  = errors.New("a connection for another data plane (DDP_TRANSPORT differs between ranks?)")
)

func tokenKey(token string) []byte {
	k := sha256.Sum256([]byte("goddp-auth\x00" + token))
	return k[:]
}

func tokenMAC(key []byte, role string, hello, nonce []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(role))
	m.Write(hello)
	m.Write(nonce)
	return m.Sum(nil)
}

// Dial runs the dialer's side on a fresh connection: this rank of world, on plane. The
// caller sets the connection's deadline. An error is a refusal or a failed proof; the caller
// closes the connection.
func Dial(c net.Conn, token string, plane byte, rank, world int) error {
	hello := make([]byte, 0, helloSize)
	hello = append(hello, magic...)
	hello = append(hello, plane)
	hello = binary.LittleEndian.AppendUint16(hello, uint16(rank))
	hello = binary.LittleEndian.AppendUint16(hello, uint16(world))
	hello = hello[:helloSize]
	rand.Read(hello[helloSize-nonceSize:])
	if _, err := c.Write(hello); err != nil {
		return err
	}
	var resp [nonceSize + macSize]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		return err
	}
	key := tokenKey(token)
	nonce := resp[:nonceSize]
	proven := hmac.Equal(resp[nonceSize:], tokenMAC(key, "listener", hello, nonce))
	proof := make([]byte, macSize) // zeros: "you did not prove the token", and nothing else
	if proven {
		proof = tokenMAC(key, "dialer", hello, nonce)
	}
	if _, err := c.Write(proof); err != nil {
		return err
	}
	var st [3]byte
	_, err := io.ReadFull(c, st[:])
	switch {
	case !proven:
		return ErrListener // whatever it answers
	case err != nil:
		return err
	case st[0] == statusOK:
		return nil
	}
	msg := make([]byte, min(int(binary.LittleEndian.Uint16(st[1:])), maxReason))
	io.ReadFull(c, msg)
	return fmt.Errorf("refused: %s", msg)
}

// DialContext is Dial that also ends when ctx does: the connection's deadline (which the caller
// still sets, to bound the handshake) is moved to the past, the handshake fails at once, and
// the error is ctx's cause. A peer that accepted the connection and never answers (a stopped
// process: its kernel still accepts) then holds an aborting rank no longer than ctx.
//
// Once ctx has ended during the handshake the connection is unusable even if the handshake
// itself got through: the deadline is moved to the past from ctx's own goroutine, possibly after
// the caller has cleared it, and the caller's first write would then fail. So that case is an
// error too, and the caller closes the connection: the peer, which may have taken it as this
// rank's stream, reads its end at once instead of waiting on a stream that never carries a frame
// (seen as a 15 s timeout of TestFailure_mismatch/tcp-inet, where a collective's sender was
// cancelled mid-dial and the abort that followed was refused as a second stream).
func DialContext(ctx context.Context, c net.Conn, token string, plane byte, rank, world int) error {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	err := Dial(c, token, plane, rank, world)
	if !stop() {
		if err == nil {
			err = errors.New("interrupted after it completed")
		}
		return fmt.Errorf("%w (handshake: %v)", context.Cause(ctx), err)
	}
	return err
}

// Accept runs the listener's side up to the dialer's proof and returns the rank and world
// it claimed (authenticated by the MAC). The caller then checks them and answers with
// Reply. Accept sets the connection's deadline: the hello must arrive within HelloDeadline
// (or within, if shorter), the whole handshake within; the caller clears it once it has
// replied.
func Accept(c net.Conn, token string, plane byte, within time.Duration) (rank, world int, err error) {
	start := time.Now()
	c.SetDeadline(start.Add(helloWithin(within)))
	var hello [helloSize]byte
	if _, err := io.ReadFull(c, hello[:len(magic)]); err != nil {
		return 0, 0, err
	}
	if string(hello[:len(magic)]) != magic {
		return 0, 0, ErrMagic
	}
	if _, err := io.ReadFull(c, hello[len(magic):]); err != nil {
		return 0, 0, err
	}
	c.SetDeadline(start.Add(within))
	key := tokenKey(token)
	var out [nonceSize + macSize]byte
	rand.Read(out[:nonceSize])
	copy(out[nonceSize:], tokenMAC(key, "listener", hello[:], out[:nonceSize]))
	if _, err := c.Write(out[:]); err != nil {
		return 0, 0, err
	}
	var mac [macSize]byte
	if _, err := io.ReadFull(c, mac[:]); err != nil {
		return 0, 0, err
	}
	if !hmac.Equal(mac[:], tokenMAC(key, "dialer", hello[:], out[:nonceSize])) {
		Reply(c, ErrDialer)
		return 0, 0, ErrDialer
	}
	if hello[len(magic)] != plane {
		Reply(c, ErrPlane)
		return 0, 0, ErrPlane
	}
	rank = int(binary.LittleEndian.Uint16(hello[len(magic)+1:]))
	world = int(binary.LittleEndian.Uint16(hello[len(magic)+3:]))
	return rank, world, nil
}

// Reply answers an authenticated hello: nil accepts, an error refuses with its text.
func Reply(c net.Conn, refuse error) error {
	if refuse == nil {
		_, err := c.Write([]byte{statusOK, 0, 0})
		return err
	}
	msg := "allreduce: " + refuse.Error()
	if len(msg) > maxReason {
		msg = msg[:maxReason]
	}
	b := make([]byte, 3, 3+len(msg))
	b[0] = statusNo
	binary.LittleEndian.PutUint16(b[1:], uint16(len(msg)))
	_, err := c.Write(append(b, msg...))
	return err
}

// CheckPeer is the rank and world check both planes make of an authenticated hello.
func CheckPeer(cfg link.Config, rank, world int) error {
	if world != cfg.WorldSize || rank < 0 || rank >= cfg.WorldSize || rank == cfg.Rank {
		return fmt.Errorf("rank %d of world %d does not fit this world of %d", rank, world, cfg.WorldSize)
	}
	return nil
}

// Addr is the remote address of an authenticated connection: the peer's own address, and
// the rank the handshake proved. The gRPC server sees it as the peer's address (peer.Addr), so
// the interceptors learn the caller's rank from the connection, not from what a call claims.
type Addr struct {
	net.Addr
	rank int
}

type conn struct {
	net.Conn
	addr Addr
}

func (c *conn) RemoteAddr() net.Addr { return c.addr }

// listener is a listener whose Accept returns only connections that completed the
// handshake on plane (see above).
type listener struct {
	net.Listener
	cfg  link.Config
	log  *slog.Logger
	g    *Guard
	out  chan net.Conn
	done chan struct{}
	once sync.Once
	err  error // the inner listener's Accept error, once out is closed
	wg   sync.WaitGroup
}

func NewListener(l net.Listener, cfg link.Config, log *slog.Logger) *listener {
	a := &listener{Listener: l, cfg: cfg, log: log, g: NewGuard(log, 0),
		out: make(chan net.Conn), done: make(chan struct{})}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *listener) loop() {
	defer a.wg.Done()
	defer close(a.out)
	for {
		c, err := a.Listener.Accept()
		if err != nil {
			a.err = err
			return
		}
		src := Source(c)
		slot := a.g.Admit(src, c)
		if slot == nil {
			c.Close()
			continue
		}
		select {
		case <-a.done: // Close ran ClosePending before this slot was taken
			c.Close()
		default:
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			ac := a.handshake(c, src, slot)
			a.g.Done(slot, ac != nil)
			if ac == nil {
				c.Close()
				return
			}
			select {
			case a.out <- ac:
			case <-a.done:
				c.Close()
			}
		}()
	}
}

// handshake authenticates raw; nil when it did not complete.
func (a *listener) handshake(raw net.Conn, src string, slot *Slot) *conn {
	rank, world, err := Accept(raw, a.cfg.Token, PlaneGRPC, min(Deadline, a.cfg.Timeout))
	if err == nil && !a.g.Proven(slot) {
		return nil // evicted before it proved the token: the connection is being closed
	}
	if err == nil {
		err = CheckPeer(a.cfg, rank, world)
		if rerr := Reply(raw, err); err == nil {
			err = rerr
		}
	}
	remote := raw.RemoteAddr().String()
	if err != nil && a.g.Closed(slot) {
		a.log.Debug("allreduce: handshake ended: the guard closed its connection (to make room, or the listener is closing)", "remote", remote, "err", err)
		return nil // not a refusal of its own: Admit counted the eviction
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrDialer):
			a.g.Refuse(src, "allreduce: refused connection with a wrong or missing token", "addr", remote)
		case errors.Is(err, ErrMagic):
			a.g.Refuse(src, "allreduce: refused a connection that is not goddp's", "addr", remote)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			a.log.Debug("allreduce: connection closed during the handshake", "remote", remote)
		default:
			a.g.Refuse(src, "allreduce: refused connection", "addr", remote, "err", err)
		}
		return nil
	}
	raw.SetDeadline(time.Time{})
	return &conn{Conn: raw, addr: Addr{Addr: raw.RemoteAddr(), rank: rank}}
}

// Accept returns the next authenticated connection.
func (a *listener) Accept() (net.Conn, error) {
	c, ok := <-a.out
	if !ok {
		return nil, a.err
	}
	return c, nil
}

// Close stops accepting, ends the handshakes in progress (their connections closed: a silent
// dialler does not hold a closing transport until the handshake's deadline) and waits for them.
func (a *listener) Close() error {
	err := a.Listener.Close()
	a.once.Do(func() { close(a.done) })
	a.g.ClosePending()
	a.wg.Wait()
	a.g.Stop()
	return err
}
