// Package leaftest holds test support that every package under allreduce can import, auth's and
// the core's in-package tests included: it imports nothing of goddp, so it closes no import cycle
// (grouptest, which imports the core, cannot serve auth's tests nor the core's own). What a helper
// needs of the handshake (its sizes, its bytes) the caller passes in. It is test support only;
// nothing else imports it.
package leaftest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// RecordingHandler is a slog.Handler that keeps log records' messages for assertions.
type RecordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *RecordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *RecordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *RecordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *RecordingHandler) WithGroup(string) slog.Handler      { return h }

// Has says whether a record's message contains sub.
func (h *RecordingHandler) Has(sub string) bool { return h.Count(sub) > 0 }

// Count is how many records' messages contain sub.
func (h *RecordingHandler) Count(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// Msgs are the messages recorded so far.
func (h *RecordingHandler) Msgs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}

// Squatter is a local process that took a rank's addresses first (the TCP port and the Unix
// socket name, as if it knew the token): it records every byte peers send it and answers the
// hello with a guess.
type Squatter struct {
	answer []byte
	mu     sync.Mutex
	got    bytes.Buffer
	lis    []net.Listener
	dial   int
}

// NewSquatter listens on a fresh loopback TCP port and on the Unix socket unixName gives for
// that port's address (where it can), until the test ends, and returns the squatter and the TCP
// address. To each connection's first bytes it writes answer once: the guess at the listener's
// nonce and proof and its status, in the handshake's sizes (package auth's), which the caller
// passes.
func NewSquatter(t *testing.T, unixName func(addr string) string, answer []byte) (*Squatter, string) {
	t.Helper()
	s := &Squatter{answer: answer}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := tl.Addr().String()
	s.lis = append(s.lis, tl)
	if ul, err := net.Listen("unix", unixName(addr)); err == nil {
		s.lis = append(s.lis, ul)
	}
	for _, l := range s.lis {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				s.mu.Lock()
				s.dial++
				s.mu.Unlock()
				go s.serve(c)
			}
		}()
	}
	t.Cleanup(func() {
		for _, l := range s.lis {
			l.Close()
		}
	})
	return s, addr
}

func (s *Squatter) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 4096)
	answered := false
	for {
		n, err := c.Read(buf)
		s.mu.Lock()
		s.got.Write(buf[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
		if !answered {
			answered = true
			c.Write(s.answer)
		}
	}
}

// Received is every byte the squatter's peers sent it so far, all connections together.
func (s *Squatter) Received() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.got.Bytes())
}

// Dials is how many connections the squatter accepted.
func (s *Squatter) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dial
}

// CheckLearnedNothing fails the test unless, once the squatter's last reads are in, it was
// dialled and received only the helloSize-byte hello and a proof of macSize zeros: nothing of
// the token (as it is, its first 8 bytes, or upper-cased) nor the first 8 bytes of key, the
// token's key. The sizes and the key are package auth's, which the caller passes.
func (s *Squatter) CheckLearnedNothing(t *testing.T, token string, helloSize, macSize int, key []byte) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // the squatter's last reads
	got := s.Received()
	if len(got) == 0 || s.Dials() == 0 {
		t.Fatal("the squatter was never dialled: the test proves nothing")
	}
	if len(got) != helloSize+macSize || !bytes.Equal(got[helloSize:], make([]byte, macSize)) {
		t.Errorf("the squatter received %d bytes, want only the %d-byte hello and a proof of zeros: % x", len(got), helloSize, got)
	}
	for _, form := range []string{token, token[:8], strings.ToUpper(token)} {
		if bytes.Contains(got, []byte(form)) {
			t.Fatalf("the squatter received the token (%q)", form)
		}
	}
	if bytes.Contains(got, key[:8]) {
		t.Fatal("the squatter received the key")
	}
}

// SilentPeer listens on loopback until the test ends and accepts connections whose first
// helloBytes bytes (the hello, or its start) it reads and never answers, as a stopped process's
// kernel accepts them; hello gets a value once a dialler is waiting.
func SilentPeer(t *testing.T, helloBytes int) (addr string, hello <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
			if _, err := io.ReadFull(c, make([]byte, helloBytes)); err == nil {
				ch <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String(), ch
}

// CancelAfterHello waits (5 s at most) for a dialler's hello to reach a SilentPeer, cancels
// the dial's context, and fails the test unless the dial's error comes on errc, as
// context.Canceled, within the given bound. what names the handshake in the failure.
func CancelAfterHello(t *testing.T, hello <-chan struct{}, cancel context.CancelFunc, errc <-chan error, within time.Duration, what string) {
	t.Helper()
	select {
	case <-hello:
	case <-time.After(5 * time.Second):
		t.Fatal("the dialler never sent its hello")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("dial to a silent peer, context cancelled: %v, want %v", err, context.Canceled)
		}
		t.Logf("returned %v after the cancel", time.Since(start))
	case <-time.After(within):
		t.Fatalf("%s with a silent peer outlived its cancelled context by %v", what, within)
	}
}
