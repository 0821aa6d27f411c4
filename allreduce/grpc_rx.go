package allreduce

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"google.golang.org/grpc/mem"
)

// Receiving without copies (plaintext links).
//
// gRPC's server reads a connection through a buffer of ReadBufferSize bytes and copies each
// HTTP/2 DATA frame's payload (at most 16 KiB: grpc-go's fixed frame size) out of it into a
// buffer from its pool; the codec then copied a message's ~65 pieces into one contiguous
// buffer: two full copies of every byte received. (Unbuffered, ReadBufferSize 0, gRPC reads
// each 9-byte frame header and each payload with a syscall of its own: slower still.)
//
// Here the server reads rxConns, unbuffered, and they buffer — cleverly. An rxConn follows the
// HTTP/2 frames and the gRPC messages inside DATA frames (a 5-byte prefix gives each message's
// length) as they arrive, so it knows where the frames of the message in flight end, and
// reads the socket with readv into a plan: frame headers into a scratch area, payloads back to
// back in a large slab. A message's payload pieces thus lie contiguously in memory. When
// gRPC's framer, having read a DATA frame's header, asks the server's pool (rxPool, set with
// experimental.BufferPool) for a buffer of the payload's size, it gets the slab region that
// payload is (being) read into, so its io.ReadFull moves nothing; and the codec (codec_raw.go)
// returns the message as a view of those pieces instead of copying them, holding them until
// the transport's caller is done with it. Each plan ends with at most one frame whose size is
// a guess (the first of the next message); where anything is not as planned (another frame
// type, a frame cut short by flow control, a small message) the bytes are still served in
// order and the framer's buffer, or the codec, copies: correctness never rests on the plan.
//
// Which connection a pool Get serves is not told by gRPC, so a region is handed out only when
// the server has exactly one rxConn, which has just served the 9-byte header of a DATA frame of
// exactly the size asked for and whose next bytes are that payload's planned slot; otherwise
// Get hands out a plain buffer. If a region were ever read into other than as planned, Read
// fails the connection (errRxAlias) rather than hand out bytes it no longer owns. TLS links
// keep gRPC's own buffering (the framer reads the TLS layer, not the socket).

var errRxAlias = errors.New("allreduce: gRPC read a frame into an unexpected buffer")

// rxSlabSize is the size of the slabs payloads are read into (DDP_GRPC_SLAB).
var rxSlabSize = grpcEnvInt("DDP_GRPC_SLAB", 8<<20)

const (
	rxFrameMax   = 16 << 10 // grpc-go's fixed HTTP/2 DATA frame size
	rxSlabsSpare = 8
	rxHdrLen     = 9 // HTTP/2 frame header
	h2Data       = 0x0
	h2Headers    = 0x1
	h2Padded     = 0x8
	http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

type rxSlab struct {
	mem        []byte
	hdrs       [][]byte // the handles Get gave out; capacity fixed, so &hdrs[i] stays put
	gets, puts int
	retired    bool
}

// rxPool is the server's buffer pool and the registry of its rxConns.
type rxPool struct {
	mu     sync.Mutex
	msgMax int     // the largest message expected (a slab is left when less room remains)
	conns  int     // live rxConns
	armed  *rxConn // the connection that served a frame header last
	narmed int     // connections that served a header whose payload they have not yet read
	live   []*rxSlab
	spare  []*rxSlab
	frames framePool // buffers for everything not read in place

	aliased, copied atomic.Int64 // DATA payloads read in place / through a copy
	views, copies   atomic.Int64 // messages the codec returned as views / copied
	reads, slabs    atomic.Int64 // socket reads; slabs allocated
}

func newRxPool(msgMax int) *rxPool { return &rxPool{msgMax: msgMax} }

// rxSlot is one part of a read plan: a frame header's bytes (in the scratch area) or a frame
// payload's (in a slab), or, past a surprise, just the stream's next bytes.
type rxSlot struct {
	b    []byte  // planned bytes
	n    int     // filled from the socket
	off  int     // served to the framer
	slab *rxSlab // nil: scratch
	ok   bool    // confirmed: exactly the payload of a DATA frame of len(b) bytes
}

// rxConn is a server-side connection read by gRPC's framer; only the framer's goroutine
// calls Read. armed and alias are guarded by p.mu.
type rxConn struct {
	net.Conn
	p   *rxPool
	raw syscall.RawConn

	slots   []rxSlot // the plan; slots[head:] not yet fully served
	frames  []int
	head    int
	fill    int // first slot not yet full
	scratch []byte
	iov     []syscall.Iovec
	s       *rxSlab // the slab payload slots are cut from
	sw      int     // its first free byte
	err     error   // sticky read error

	// What the next byte from the socket is (the parser's state).
	hdrHave  int // header bytes collected in hb; rxHdrLen-hdrHave to come before a payload
	hb       [rxHdrLen]byte
	payRem   int    // payload bytes of the current frame still to come
	data     bool   // the current frame is an unpadded DATA frame of stream sid
	sid      uint32 // the stream whose messages are followed
	msgLeft  int    // bytes of the current message of sid still to come, prefix included; -1: unknown
	pfxHave  int    // message prefix bytes collected (while msgLeft is -1 at a message start)
	pfx      [5]byte
	msgStart bool // the next DATA byte of sid starts a message
	first    int  // payload size of the last message's first frame

	armed int     // payload size of the DATA frame whose header was served last (p.mu)
	alias uintptr // the region Get handed out for it (p.mu)
	close sync.Once
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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c, nil
	}
	l.p.mu.Lock()
	l.p.conns++
	l.p.mu.Unlock()
	// A client's first bytes are the 24-byte HTTP/2 preface, not a frame: parse it as the
	// payload of a frame that is not DATA.
	return &rxConn{Conn: c, p: l.p, raw: raw, msgLeft: -1, hdrHave: rxHdrLen, payRem: len(http2Preface)}, nil
}

func (c *rxConn) Close() error {
	c.close.Do(func() {
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
		c.skipServed()
		if c.head == len(c.slots) {
			return 0, errRxAlias
		}
		sl := &c.slots[c.head]
		if sl.off != 0 || !sl.ok || len(sl.b) != len(b) || uintptr(unsafe.Pointer(&b[0])) != alias || alias != uintptr(unsafe.Pointer(&sl.b[0])) {
			return 0, errRxAlias
		}
		for sl.n < len(sl.b) {
			if err := c.readMore(); err != nil {
				return 0, err
			}
			sl = &c.slots[c.head]
		}
		sl.off = len(sl.b)
		c.p.aliased.Add(1)
		return len(b), nil
	}
	need := min(len(b), rxHdrLen) // a frame header is served whole, to be recognised
	k := 0
	for k < len(b) {
		c.skipServed()
		if c.head < len(c.slots) {
			if sl := &c.slots[c.head]; sl.n > sl.off {
				m := copy(b[k:], sl.b[sl.off:sl.n])
				sl.off += m
				k += m
				continue
			}
		}
		if k >= need {
			break
		}
		if err := c.readMore(); err != nil {
			if k > 0 {
				break
			}
			return 0, err
		}
	}
	if k == rxHdrLen && len(b) == rxHdrLen {
		length := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		c.p.mu.Lock()
		c.armed = -1 // counts even when not a payload to alias (Get cannot tell callers apart)
		if b[3] == h2Data && b[4]&h2Padded == 0 && length > 0 {
			c.armed = length
		}
		c.p.narmed++
		c.p.armed = c
		c.p.mu.Unlock()
	} else if k >= rxFrameMax/2 {
		c.p.copied.Add(1)
	}
	return k, nil
}

// skipServed moves head past slots fully served.
func (c *rxConn) skipServed() {
	for c.head < len(c.slots) && c.slots[c.head].off == len(c.slots[c.head].b) {
		c.head++
	}
}

// readMore reads the socket into the plan, making a new plan first if the current one is
// full (then every slot of it has been served: reads happen only when the framer needs bytes).
func (c *rxConn) readMore() error {
	if c.err != nil {
		return c.err
	}
	if c.fill == len(c.slots) {
		c.plan()
	}
	c.iov = c.iov[:0]
	for i := c.fill; i < len(c.slots); i++ {
		sl := &c.slots[i]
		v := syscall.Iovec{Base: &sl.b[sl.n]}
		v.SetLen(len(sl.b) - sl.n)
		c.iov = append(c.iov, v)
	}
	n, err := readv(c.raw, c.iov)
	c.p.reads.Add(1)
	if err != nil {
		c.err = err
		c.p.mu.Lock()
		if c.s != nil {
			c.p.retire(c.s) // nothing unserved lies in it once the framer sees the error
			c.s = nil
		}
		c.p.mu.Unlock()
		return err
	}
	for n > 0 {
		sl := &c.slots[c.fill]
		t := min(n, len(sl.b)-sl.n)
		c.parse(c.fill, sl.b[sl.n:sl.n+t], sl.n+t == len(sl.b))
		sl.n += t
		n -= t
		if sl.n == len(sl.b) {
			c.fill++
		}
	}
	return nil
}

// parse follows the frames and messages through bytes just read into slot i (b: the new
// bytes, which fill the slot when full is true).
func (c *rxConn) parse(i int, b []byte, full bool) {
	for len(b) > 0 {
		if c.hdrHave < rxHdrLen {
			t := copy(c.hb[c.hdrHave:], b)
			c.hdrHave += t
			b = b[t:]
			if c.hdrHave < rxHdrLen {
				return
			}
			h := c.hb[:]
			length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			sid := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
			if h[3] == h2Headers && sid != 0 && sid != c.sid {
				// A new stream: its first DATA byte starts a message.
				c.sid, c.msgLeft, c.msgStart, c.pfxHave = sid, -1, true, 0
			}
			c.payRem = length
			c.data = h[3] == h2Data && h[4]&h2Padded == 0 && sid == c.sid && sid != 0
			if c.data && c.msgStart && length > 0 {
				c.first = length // the size to guess for the next message's first frame
			}
			if len(b) == 0 && full && c.slots[i].slab == nil && i+1 < len(c.slots) {
				// The header ended with its slot: is the next slot exactly its payload?
				nx := &c.slots[i+1]
				nx.ok = c.data && nx.slab != nil && nx.n == 0 && len(nx.b) == length
			}
			if length == 0 {
				c.hdrHave = 0
			}
			continue
		}
		t := min(len(b), c.payRem)
		if c.data {
			c.follow(b[:t])
		}
		c.payRem -= t
		b = b[t:]
		if c.payRem == 0 {
			c.hdrHave = 0
		}
	}
}

// follow tracks message boundaries through DATA payload bytes of stream sid.
func (c *rxConn) follow(b []byte) {
	for len(b) > 0 {
		if c.msgStart {
			c.msgStart, c.pfxHave, c.msgLeft = false, 0, -1
		}
		if c.msgLeft < 0 { // collecting the 5-byte prefix
			t := copy(c.pfx[c.pfxHave:], b)
			c.pfxHave += t
			b = b[t:]
			if c.pfxHave == len(c.pfx) {
				c.msgLeft = int(binary.BigEndian.Uint32(c.pfx[1:]))
				if c.msgLeft == 0 {
					c.msgStart = true
				}
			}
			continue
		}
		t := min(len(b), c.msgLeft)
		c.msgLeft -= t
		b = b[t:]
		if c.msgLeft == 0 {
			c.msgStart = true
		}
	}
}

// plan lays out the next read: the rest of the current frame, then the frames left of the
// current message (their sizes follow from its length), then one more frame (a guess: the
// next message's first, full size); each header in scratch, each payload in the slab right
// after the previous one.
func (c *rxConn) plan() {
	c.slots, c.head, c.fill = c.slots[:0], 0, 0
	c.scratch = c.scratch[:0]
	inHdr := c.hdrHave < rxHdrLen
	cur := 0 // payload bytes of the current frame still to come
	if !inHdr {
		cur = c.payRem
	}
	known := c.msgLeft >= 0 && !c.msgStart && (inHdr || c.data)
	frames := c.frames[:0] // payload sizes of the frames after the current one
	total, limit := cur, rxSlabSize/2
	if known {
		for rest := c.msgLeft - cur; rest > 0 && total < limit; {
			e := min(rest, rxFrameMax)
			frames = append(frames, e)
			total += e
			rest -= e
		}
	}
	c.p.mu.Lock()
	room := 0
	if c.s != nil {
		room = len(c.s.mem) - c.sw
	}
	if c.s == nil || total > room || (len(frames) == 0 && room-total < c.p.msgMax) {
		if c.s != nil {
			c.p.retire(c.s)
		}
		c.s, c.sw = c.p.newSlab(), 0
		room = len(c.s.mem)
	}
	c.p.mu.Unlock()
	// The guess, only where the whole message it starts fits behind it: a message's pieces must
	// share a slab to be a view.
	if room-total >= c.p.msgMax || (len(frames) == 0 && room > total) {
		g := c.first
		if g <= 0 {
			g = rxFrameMax
		}
		frames = append(frames, min(g, room-total))
	}
	c.frames = frames
	if need := (len(frames) + 1) * rxHdrLen; cap(c.scratch) < need {
		c.scratch = make([]byte, 0, need)
	}
	pay := func(n int) {
		n = min(n, len(c.s.mem)-c.sw)
		if n <= 0 {
			return
		}
		c.slots = append(c.slots, rxSlot{b: c.s.mem[c.sw : c.sw+n : c.sw+n], slab: c.s})
		c.sw += n
	}
	hdr := func(n int) {
		k := len(c.scratch)
		c.scratch = c.scratch[:k+n]
		c.slots = append(c.slots, rxSlot{b: c.scratch[k : k+n : k+n]})
	}
	if inHdr {
		hdr(rxHdrLen - c.hdrHave)
	} else {
		pay(cur)
	}
	for i, e := range frames {
		if i > 0 || !inHdr {
			hdr(rxHdrLen)
		}
		pay(e)
	}
}

func (p *rxPool) Get(n int) *[]byte {
	p.mu.Lock()
	if c := p.armed; c != nil && p.conns == 1 && p.narmed == 1 && c.armed == n {
		c.skipServed()
		if c.head < len(c.slots) {
			sl := &c.slots[c.head]
			if s := sl.slab; sl.ok && sl.off == 0 && len(sl.b) == n && len(s.hdrs) < cap(s.hdrs) {
				s.hdrs = append(s.hdrs, sl.b)
				h := &s.hdrs[len(s.hdrs)-1]
				s.gets++
				c.alias = uintptr(unsafe.Pointer(&sl.b[0]))
				c.disarm()
				p.mu.Unlock()
				return h
			}
		}
	}
	p.mu.Unlock()
	return p.frames.Get(n)
}

func (p *rxPool) Put(h *[]byte) {
	if cap(*h) > 0 {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(*h)))
		p.mu.Lock()
		if s := p.find(a, a); s != nil {
			s.puts++
			if s.retired && s.puts == s.gets {
				p.recycle(s)
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	p.frames.Put(h)
}

// holds says whether [lo, hi) lies in one slab (the codec's test for a view).
func (p *rxPool) holds(lo, hi uintptr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.find(lo, hi) != nil
}

// find, newSlab, retire and recycle run with p.mu held.
func (p *rxPool) find(lo, hi uintptr) *rxSlab {
	for _, s := range p.live {
		if base := uintptr(unsafe.Pointer(unsafe.SliceData(s.mem))); lo >= base && hi <= base+uintptr(len(s.mem)) {
			return s
		}
	}
	return nil
}

func (p *rxPool) newSlab() *rxSlab {
	var s *rxSlab
	if k := len(p.spare); k > 0 {
		s, p.spare = p.spare[k-1], p.spare[:k-1]
	} else {
		p.slabs.Add(1)
		s = &rxSlab{mem: make([]byte, rxSlabSize), hdrs: make([][]byte, 0, rxSlabSize/1024+1)}
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
