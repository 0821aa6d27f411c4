//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's PeerMirrorDevice (tensor.PeerMirror says what each call does): a tensor
// exported by cuIpcGetMemHandle, the peers' mapped by cuIpcOpenMemHandle, and Pull a
// cuMemcpyDtoDAsync on the compute stream — the copy engines move the bytes, no kernel runs and
// nothing waits on another process. Goroutine ranks of one process (the tests) use each other's
// addresses directly (a process cannot open its own handles), as the IPC all-reduce does (ipc.go).
// Not yet run on a GPU.

var _ tensor.PeerMirrorDevice = (*Device)(nil)

const mirrorVersion = 1

// mirrorHandle is what one rank tells the others.
type mirrorHandle struct {
	pid     uint64
	ordinal uint32
	dtype   uint32 // tensor.DType
	count   uint64
	mem     cudadrv.IpcMemHandle // of the tensor's allocation
	off     uint64               // the tensor's offset in it
	ptr     uint64               // its address in the exporting process
}

const mirrorHandleBytes = 4 + 8 + 4 + 4 + 8 + cudadrv.IPCHandleSize + 8 + 8

func (h *mirrorHandle) encode() []byte {
	b := make([]byte, 0, mirrorHandleBytes)
	b = binary.LittleEndian.AppendUint32(b, mirrorVersion)
	b = binary.LittleEndian.AppendUint64(b, h.pid)
	b = binary.LittleEndian.AppendUint32(b, h.ordinal)
	b = binary.LittleEndian.AppendUint32(b, h.dtype)
	b = binary.LittleEndian.AppendUint64(b, h.count)
	b = append(b, h.mem[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.off)
	return binary.LittleEndian.AppendUint64(b, h.ptr)
}

func decodeMirrorHandle(b []byte) (mirrorHandle, error) {
	var h mirrorHandle
	if len(b) != mirrorHandleBytes {
		return h, fmt.Errorf("%d bytes, want %d", len(b), mirrorHandleBytes)
	}
	if v := binary.LittleEndian.Uint32(b); v != mirrorVersion {
		return h, fmt.Errorf("handle version %d, this build reads %d", v, mirrorVersion)
	}
	b = b[4:]
	h.pid, b = binary.LittleEndian.Uint64(b), b[8:]
	h.ordinal, b = binary.LittleEndian.Uint32(b), b[4:]
	h.dtype, b = binary.LittleEndian.Uint32(b), b[4:]
	h.count, b = binary.LittleEndian.Uint64(b), b[8:]
	copy(h.mem[:], b)
	b = b[cudadrv.IPCHandleSize:]
	h.off, b = binary.LittleEndian.Uint64(b), b[8:]
	h.ptr = binary.LittleEndian.Uint64(b)
	return h, nil
}

type peerMirror struct {
	d          *Device
	t          *tensor.Tensor
	rank, size int
	me         mirrorHandle
	peers      []uint64 // each rank's tensor as this process addresses it (this rank's own at rank)
	opened     []uint64 // allocations mapped by IpcOpenMemHandle, closed by Close
	connected  bool
	closed     bool
}

// NewPeerMirror exports t's allocation. t must stay allocated until every peer's last Pull.
func (d *Device) NewPeerMirror(t *tensor.Tensor, rank, size int) (tensor.PeerMirror, error) {
	cb, ok := t.Buffer().(*cudaBuf)
	if !ok {
		return nil, fmt.Errorf("cuda: peer mirror: %s does not live on a CUDA device", t)
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("cuda: peer mirror: rank %d of %d", rank, size)
	}
	m := &peerMirror{d: d, t: t, rank: rank, size: size,
		me: mirrorHandle{pid: uint64(os.Getpid()), ordinal: uint32(d.ordinal), dtype: uint32(t.DType()), count: uint64(t.Len()),
			off: dptr(t) - cb.ptr, ptr: dptr(t)}}
	d.enter()
	defer d.leave()
	var err error
	if m.me.mem, err = cudadrv.IpcGetMemHandle(cb.ptr); err != nil {
		return nil, fmt.Errorf("cuda: peer mirror of %s: %w", t, err)
	}
	return m, nil
}

func (m *peerMirror) Handle() []byte { return m.me.encode() }

func (m *peerMirror) Connect(handles [][]byte) error {
	if m.connected {
		return errors.New("cuda: peer mirror: connected twice")
	}
	if len(handles) != m.size {
		return fmt.Errorf("cuda: peer mirror: %d handles for %d ranks", len(handles), m.size)
	}
	d := m.d
	d.enter()
	defer d.leave()
	m.peers = make([]uint64, m.size)
	for q, b := range handles {
		h, err := decodeMirrorHandle(b)
		if err != nil {
			return fmt.Errorf("cuda: peer mirror: handle of rank %d: %w", q, err)
		}
		if h.dtype != m.me.dtype || h.count != m.me.count {
			return fmt.Errorf("cuda: peer mirror: rank %d shares %d elements of %s, this rank (%d) %d of %s",
				q, h.count, tensor.DType(h.dtype), m.rank, m.me.count, tensor.DType(m.me.dtype))
		}
		switch {
		case q == m.rank:
			m.peers[q] = m.me.ptr
		case h.pid == m.me.pid: // a goroutine rank of this process: its address is valid here
			m.peers[q] = h.ptr
		default:
			if h.ordinal != m.me.ordinal {
				if can, err := cudadrv.DeviceCanAccessPeer(d.ordinal, int(h.ordinal)); err != nil || !can {
					return fmt.Errorf("cuda: peer mirror: GPU %d cannot address rank %d's GPU %d (peer access: %v)", d.ordinal, q, h.ordinal, err)
				}
			}
			base, err := cudadrv.IpcOpenMemHandle(h.mem)
			if err != nil {
				return fmt.Errorf("cuda: peer mirror: opening rank %d's tensor: %w", q, err)
			}
			m.opened = append(m.opened, base)
			m.peers[q] = base + h.off
		}
	}
	m.connected = true
	return nil
}

// Pull enqueues the copy on the compute stream. A failure to enqueue panics, as a kernel launch's
// does: the stream is in an unknown state.
func (m *peerMirror) Pull(peer, lo, hi int) {
	if !m.connected || m.closed {
		panic(fmt.Sprintf("cuda: peer mirror: Pull from rank %d before Connect or after Close", peer))
	}
	if peer < 0 || peer >= m.size || lo < 0 || hi > m.t.Len() || lo > hi {
		panic(fmt.Sprintf("cuda: peer mirror: Pull of [%d, %d) from rank %d: %d elements, %d ranks", lo, hi, peer, m.t.Len(), m.size))
	}
	if peer == m.rank || lo == hi {
		return
	}
	es := uint64(m.t.DType().Size())
	d := m.d
	d.enter()
	defer d.leave()
	if err := cudadrv.DtoD(m.me.ptr+uint64(lo)*es, m.peers[peer]+uint64(lo)*es, int64(hi-lo)*int64(es), d.stream); err != nil {
		panic(fmt.Sprintf("cuda: peer mirror: copying [%d, %d) from rank %d: %v", lo, hi, peer, err))
	}
}

func (m *peerMirror) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	d := m.d
	d.enter()
	defer d.leave()
	errs := []error{d.stream.Sync()}
	for _, p := range m.opened {
		errs = append(errs, cudadrv.IpcCloseMemHandle(p))
	}
	m.opened = nil
	return errors.Join(errs...)
}
