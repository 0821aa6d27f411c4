package allreduce

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/goddp/goddp/allreduce/link"
)

// Every collective has one sender goroutine: the caller's goroutine receives, reduces and
// queues "send this chunk next" jobs; the sender encodes each chunk straight into the
// transport's buffer and sends it. Receiving and reducing one chunk thus overlaps encoding and
// sending another. The job queue never blocks the receiver (its capacity covers every job of
// the collective), so a ring of ranks all sending at once cannot deadlock on it.

// sendJob is one frame to send: a header and where its payload comes from.
type sendJob struct {
	hdr   frameHeader
	rb    reduceBuf // all-reduce: encode elements [lo, hi) of rb
	lo    int
	scale float32
	data  []byte // byte collectives: the payload itself
}

// framePayload adapts a sendJob to Payload.
type framePayload struct{ j *sendJob }

func (p framePayload) Size() int { return frameHeaderSize + p.j.hdr.payloadBytes() }

func (p framePayload) Encode(b []byte) {
	j := p.j
	putFrameHeader(b, &j.hdr)
	if j.rb != nil {
		j.rb.encode(b[frameHeaderSize:], j.lo, j.lo+int(j.hdr.n), j.scale)
	} else {
		copy(b[frameHeaderSize:], j.data)
	}
}

// jobQueue is an unbounded FIFO of send jobs with one consumer.
type jobQueue struct {
	mu     sync.Mutex
	jobs   []sendJob
	head   int
	signal chan struct{} // capacity 1: "something was pushed"
}

func (q *jobQueue) reset() {
	q.mu.Lock()
	clear(q.jobs) // drop references to buffers
	q.jobs, q.head = q.jobs[:0], 0
	q.mu.Unlock()
	if q.signal == nil {
		q.signal = make(chan struct{}, 1)
	}
	select {
	case <-q.signal:
	default:
	}
}

func (q *jobQueue) push(j sendJob) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *jobQueue) pop() (sendJob, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.jobs) {
		return sendJob{}, false
	}
	j := q.jobs[q.head]
	q.jobs[q.head] = sendJob{}
	q.head++
	return j, true
}

// startSender starts the collective's sender goroutine.
func (c *collective) startSender() {
	c.g.jobs.reset()
	c.senderDone = make(chan error, 1)
	go func() {
		err := c.runSender(&c.g.jobs)
		if err != nil {
			c.cancel(err)
		}
		c.senderDone <- err
	}()
}

// queue hands a job to the sender; it never blocks.
func (c *collective) queue(j sendJob) { c.g.jobs.push(j) }

// finish tells the sender that no more jobs come for this collective.
func (c *collective) finish() { c.g.jobs.push(sendJob{}) }

func (c *collective) runSender(q *jobQueue) error {
	g := c.g
	// An idle sender says it is alive every Timeout/3, so the next rank's watchdog only fires
	// for ranks that are really gone or stuck.
	tick := time.NewTicker(g.cfg.Timeout / 3)
	defer tick.Stop()
	keepalive := frameHeader{kind: kindKeepalive, wire: wireBytes, origin: g.rank, seq: c.seq}
	for {
		if c.ctx.Err() != nil {
			return nil // the collective failed: stop sending; the receiving side reports why
		}
		j, ok := q.pop()
		if !ok {
			select {
			case <-q.signal:
			case <-tick.C:
				kb := make([]byte, frameHeaderSize)
				putFrameHeader(kb, &keepalive)
				if err := g.tr.Send(c.ctx, c.next, link.Bytes(kb)); err != nil {
					return c.sendErr(err)
				}
			case <-c.ctx.Done():
				return nil // the receiving side reports the cause
			}
			continue
		}
		if j.hdr.kind == kindInvalid {
			return nil // finish
		}
		p := framePayload{&j}
		if err := g.tr.Send(c.ctx, c.next, p); err != nil {
			return c.sendErr(err)
		}
		g.bytesSent.Add(int64(p.Size()))
		c.progress()
		if c.sentSig != nil {
			c.sent.Add(1)
			select {
			case c.sentSig <- struct{}{}:
			default:
			}
		}
	}
}

func (c *collective) sendErr(err error) error {
	if c.ctx.Err() != nil {
		return nil
	}
	var pe *link.PeerError
	if !errors.As(err, &pe) && !errors.Is(err, link.ErrClosed) && !errors.Is(err, context.Canceled) {
		err = &link.PeerError{Rank: c.next, Err: err}
	}
	return err
}
