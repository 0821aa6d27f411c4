package grpcnet

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/grpc/mem"
)

// Buffers of the gRPC data plane (transport.go). The connections themselves, and the Unix-domain
// twin of the server's listener, are auth's (auth/grpc.go).

// sendPool is the buffer pool Marshal encodes outgoing frames into. Unlike gRPC's default pool
// it does not clear a buffer it hands out (Encode overwrites every byte), and it keeps a few
// buffers of the data plane's message size, so steady state allocates nothing.
type sendPool struct {
	mu   sync.Mutex
	free []*[]byte
}

var grpcSendPool = &sendPool{}

func (p *sendPool) Get(n int) *[]byte {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; cap(*b) >= n {
			p.free[i] = p.free[len(p.free)-1]
			p.free[len(p.free)-1] = nil
			p.free = p.free[:len(p.free)-1]
			p.mu.Unlock()
			*b = (*b)[:n]
			return b
		}
	}
	p.mu.Unlock()
	b := make([]byte, n)
	return &b
}

func (p *sendPool) Put(b *[]byte) {
	p.mu.Lock()
	if len(p.free) < 16 {
		p.free = append(p.free, b)
	} else { // keep the largest
		small := 0
		for i, f := range p.free {
			if cap(*f) < cap(*p.free[small]) {
				small = i
			}
		}
		if cap(*b) > cap(*p.free[small]) {
			p.free[small] = b
		}
	}
	p.mu.Unlock()
}

var _ mem.BufferPool = (*sendPool)(nil)

// framePool is a LIFO free list of gRPC frame buffers that does not clear them (gRPC's default
// pool zeroes every 16 KiB buffer it hands out; the framer overwrites it anyway). LIFO keeps
// the few buffers in use hot in cache.
type framePool struct {
	mu   sync.Mutex
	free []*[]byte
}

func (p *framePool) Get(n int) *[]byte {
	p.mu.Lock()
	if k := len(p.free); k > 0 && cap(*p.free[k-1]) >= n {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		p.mu.Unlock()
		*b = (*b)[:n]
		return b
	}
	p.mu.Unlock()
	b := make([]byte, n, max(n, rxFrameMax))
	return &b
}

func (p *framePool) Put(b *[]byte) {
	if cap(*b) != rxFrameMax {
		return
	}
	p.mu.Lock()
	if len(p.free) < 4096 {
		p.free = append(p.free, b)
	}
	p.mu.Unlock()
}

// Receiving without gRPC's read-buffer copy (plaintext links only).
//
// gRPC's server reads the connection through a buffer of ReadBufferSize bytes and copies each
// DATA frame's payload out of it into a buffer from its pool: one full copy of every byte
// received, from memory the kernel just wrote. Unbuffered (ReadBufferSize 0) it reads each
// 9-byte frame header and each payload with a syscall of its own, which measured worse still.
// Instead the server reads an rxConn unbuffered, and rxConn buffers: it reads the socket in
// large blocks into slabs, serves frame headers from them, and when the framer then asks the
// pool (rxPool, the server's experimental.BufferPool) for the payload's buffer, hands it the
// slab region where that payload already lies (or is about to be read), so the framer's
// io.ReadFull into it moves nothing. A slab is reused once gRPC has freed every payload in it.
//
// Which connection a pool Get serves is not told by gRPC, so aliasing happens only when the
// server has exactly one rxConn, which has just served the 9-byte header of a DATA frame of
// exactly the size asked for; otherwise Get hands out a plain buffer and the connection's Read
// copies, as gRPC's buffer would. If a region were ever used by anything but that payload read,
// Read fails the connection (errRxAlias) rather than hand out bytes it no longer owns.
// TLS links keep gRPC's own buffering (the framer reads the TLS layer, not the socket).

var errRxAlias = errors.New("allreduce: gRPC read a frame into an unexpected buffer")

const (
	rxFrameMax   = 16 << 10 // grpc-go's fixed HTTP/2 DATA frame size
	rxMinRead    = 64 << 10 // a slab with less room than this is retired before the next read
	rxSlabsSpare = 16
	http2Data    = 0x0
	http2Padded  = 0x8
)

type rxSlab struct {
	mem        []byte
	hdrs       [][]byte // handles given to gRPC; capacity fixed, so &hdrs[i] stays put
	gets, puts int
	retired    bool
}

// rxPool is the server's buffer pool and the registry of its rxConns.
type rxPool struct {
	slab   int // bytes of a slab (link.Config.GRPCSlabBytes)
	mu     sync.Mutex
	conns  int
	armed  *rxConn // the connection that just served a DATA frame header
	narmed int     // how many connections are armed
	live   []*rxSlab
	spare  []*rxSlab
	frames framePool // everything not aliased

	aliased, copied atomic.Int64 // DATA payloads read in place and through a copy
	reads, slabs    atomic.Int64 // socket reads; slabs allocated
}

// rxConn is a server-side connection read by gRPC's framer (see above). Only the framer's
// goroutine reads it; pool state is guarded by rxPool.mu.
type rxConn struct {
	net.Conn
	p      *rxPool
	s      *rxSlab
	r, w   int     // s.mem[r:w] is read from the socket and not yet consumed
	err    error   // sticky: the socket's read error
	armed  int     // payload size of the DATA frame whose header was served last (p.mu)
	alias  uintptr // the region handed out for it (p.mu)
	closed sync.Once
}

type rxListener struct {
	net.Listener
	p *rxPool
}

func (l rxListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.p.mu.Lock()
	l.p.conns++
	l.p.mu.Unlock()
	return &rxConn{Conn: c, p: l.p}, nil
}

func (c *rxConn) Close() error {
	c.closed.Do(func() {
		c.p.mu.Lock()
		c.p.conns--
		c.disarm()
		c.p.mu.Unlock()
	})
	return c.Conn.Close()
}

// disarm forgets the served header; p.mu held.
func (c *rxConn) disarm() {
	if c.armed != 0 {
		c.armed = 0
		c.p.narmed--
		if c.p.armed == c {
			c.p.armed = nil
		}
	}
}

func (c *rxConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.p.mu.Lock()
	c.disarm()
	alias := c.alias
	c.alias = 0
	c.p.mu.Unlock()
	if alias != 0 {
		if uintptr(unsafe.Pointer(&b[0])) != alias || c.r+len(b) > len(c.s.mem) {
			return 0, errRxAlias
		}
		for c.w < c.r+len(b) { // the region lies in this slab: read on into it
			if err := c.read(); err != nil {
				return 0, err
			}
		}
		c.r += len(b)
		c.p.aliased.Add(1)
		return len(b), nil
	}
	// A frame header (9 bytes) is served whole, so it can be recognised.
	for c.w-c.r < min(len(b), 9) {
		if err := c.fill(); err != nil {
			if c.w > c.r {
				break // hand out what there is; the error comes back on the next read
			}
			return 0, err
		}
	}
	n := copy(b, c.s.mem[c.r:c.w])
	c.r += n
	if n == 9 && len(b) == 9 {
		length := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		c.p.mu.Lock()
		c.armed = -1 // not a DATA payload to alias; still counts (Get cannot tell callers apart)
		if b[3] == http2Data && b[4]&http2Padded == 0 && length > 0 {
			c.armed = length
		}
		c.p.narmed++
		c.p.armed = c
		c.p.mu.Unlock()
	} else if n >= rxFrameMax/2 {
		c.p.copied.Add(1)
	}
	return n, nil
}

// fill reads the socket into the current slab, switching to a fresh one when little room is
// left (moving the unconsumed bytes along).
func (c *rxConn) fill() error {
	if c.err == nil && (c.s == nil || len(c.s.mem)-c.w < rxMinRead) {
		c.p.mu.Lock()
		old := c.s
		s := c.p.newSlab()
		if old != nil {
			c.p.retire(old)
		}
		if old != nil {
			copy(s.mem, old.mem[c.r:c.w])
		}
		c.s, c.r, c.w = s, 0, c.w-c.r
		c.p.mu.Unlock()
	}
	return c.read()
}

// read reads the socket into the current slab's free end. After the socket fails, the slab
// goes back to the pool once its bytes are consumed.
func (c *rxConn) read() error {
	if c.err == nil {
		k, err := c.Conn.Read(c.s.mem[c.w:])
		c.p.reads.Add(1)
		c.w += k
		if k > 0 {
			return nil
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		c.err = err
	}
	if c.s != nil && c.r == c.w {
		c.p.mu.Lock()
		c.p.retire(c.s)
		c.s = nil
		c.p.mu.Unlock()
	}
	return c.err
}

func (p *rxPool) Get(n int) *[]byte {
	p.mu.Lock()
	if c := p.armed; c != nil && p.conns == 1 && p.narmed == 1 && c.armed == n && c.s != nil {
		if c.r+n > len(c.s.mem) { // the payload does not fit behind its header: move to a fresh slab
			old := c.s
			s := p.newSlab()
			p.retire(old)
			copy(s.mem, old.mem[c.r:c.w])
			c.s, c.r, c.w = s, 0, c.w-c.r
		}
		s := c.s
		if len(s.hdrs) < cap(s.hdrs) && c.r+n <= len(s.mem) {
			s.hdrs = append(s.hdrs, s.mem[c.r:c.r+n:c.r+n])
			h := &s.hdrs[len(s.hdrs)-1]
			s.gets++
			c.alias = uintptr(unsafe.Pointer(&s.mem[c.r]))
			c.disarm()
			p.mu.Unlock()
			return h
		}
	}
	p.mu.Unlock()
	return p.frames.Get(n)
}

func (p *rxPool) Put(h *[]byte) {
	if cap(*h) > 0 {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(*h)))
		p.mu.Lock()
		for _, s := range p.live {
			if base := uintptr(unsafe.Pointer(unsafe.SliceData(s.mem))); a >= base && a < base+uintptr(len(s.mem)) {
				s.puts++
				if s.retired && s.puts == s.gets {
					p.recycle(s)
				}
				p.mu.Unlock()
				return
			}
		}
		p.mu.Unlock()
	}
	p.frames.Put(h)
}

// newSlab, retire and recycle run with p.mu held.
func (p *rxPool) newSlab() *rxSlab {
	var s *rxSlab
	if k := len(p.spare); k > 0 {
		s, p.spare = p.spare[k-1], p.spare[:k-1]
	} else {
		p.slabs.Add(1)
		s = &rxSlab{mem: make([]byte, p.slab), hdrs: make([][]byte, 0, p.slab/1024+1)}
	}
	p.live = append(p.live, s)
	return s
}

func (p *rxPool) retire(s *rxSlab) {
	s.retired = true
	if s.puts == s.gets {
		p.recycle(s)
	}
}

func (p *rxPool) recycle(s *rxSlab) {
	for i, l := range p.live {
		if l == s {
			p.live = append(p.live[:i], p.live[i+1:]...)
			break
		}
	}
	clear(s.hdrs)
	s.hdrs, s.gets, s.puts, s.retired = s.hdrs[:0], 0, 0, false
	if len(p.spare) < rxSlabsSpare {
		p.spare = append(p.spare, s)
	}
}

var _ mem.BufferPool = (*rxPool)(nil)
