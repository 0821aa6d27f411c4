package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unsafe"
)

// Token shards in llm.c's format: a header of 256 little-endian int32 — magic 20240520, version 1,
// the token count — then the tokens as little-endian uint16. `ddpbench tokenize` writes them
// (tokenize.go); a Tokens data set reads them memory-mapped.
//
// Shards of a set are named <prefix>_train_NNNNNN.bin and <prefix>_val_NNNNNN.bin (llm.c's naming):
// a path that is a directory or a glob gives the train shards (every matching .bin whose name does
// not contain "_val_") and the eval shards (those that do).
const (
	ShardMagic      = 20240520
	ShardVersion    = 1
	shardHeaderInts = 256
	ShardHeaderSize = shardHeaderInts * 4
)

// Shard is one memory-mapped token file.
type Shard struct {
	Path   string
	Tokens []uint16 // a view of the mapping: read only
	mm     []byte
}

// OpenShard maps the shard at path and checks it: the header's magic and version, a size that
// matches its token count exactly (a truncated or padded file is refused), and every token below
// vocab. Errors name the file.
func OpenShard(path string, vocab int) (*Shard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: token shard: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("data: token shard %s: %w", path, err)
	}
	if st.Size() < ShardHeaderSize {
		return nil, fmt.Errorf("data: token shard %s: %d bytes is shorter than the %d-byte header (truncated?)", path, st.Size(), ShardHeaderSize)
	}
	var hdr [ShardHeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("data: token shard %s: %w", path, err)
	}
	magic := int32(binary.LittleEndian.Uint32(hdr[0:]))
	version := int32(binary.LittleEndian.Uint32(hdr[4:]))
	n := int64(int32(binary.LittleEndian.Uint32(hdr[8:])))
	switch {
	case magic != ShardMagic:
		return nil, fmt.Errorf("data: token shard %s: magic %d, want %d (not an llm.c token shard)", path, magic, ShardMagic)
	case version != ShardVersion:
		return nil, fmt.Errorf("data: token shard %s: version %d, want %d", path, version, ShardVersion)
	case n < 0 || st.Size() != ShardHeaderSize+2*n:
		return nil, fmt.Errorf("data: token shard %s: the header says %d tokens (%d bytes) but the file has %d bytes (truncated?)", path, n, ShardHeaderSize+2*n, st.Size())
	}
	s := &Shard{Path: path}
	if n == 0 {
		return s, nil
	}
	s.mm, err = syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("data: token shard %s: mmap: %w", path, err)
	}
	s.Tokens = unsafe.Slice((*uint16)(unsafe.Pointer(&s.mm[ShardHeaderSize])), n)
	for i, t := range s.Tokens {
		if int(t) >= vocab {
			s.Close()
			return nil, fmt.Errorf("data: token shard %s: token %d at position %d is outside the vocabulary of %d", path, t, i, vocab)
		}
	}
	return s, nil
}

// Close unmaps the shard.
func (s *Shard) Close() error {
	if s.mm == nil {
		return nil
	}
	err := syscall.Munmap(s.mm)
	s.mm, s.Tokens = nil, nil
	return err
}

// WriteShard writes tokens to path in the shard format, atomically: a temporary file beside it,
// synced, then renamed over path.
func WriteShard(path string, tokens []uint16) error {
	if len(tokens) > 1<<31-1 {
		return fmt.Errorf("data: token shard %s: %d tokens do not fit the header's int32", path, len(tokens))
	}
	buf := make([]byte, ShardHeaderSize+2*len(tokens))
	binary.LittleEndian.PutUint32(buf[0:], ShardMagic)
	binary.LittleEndian.PutUint32(buf[4:], ShardVersion)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(tokens)))
	for i, t := range tokens {
		binary.LittleEndian.PutUint16(buf[ShardHeaderSize+2*i:], t)
	}
	if err := WriteFileAtomic(path, buf); err != nil {
		return fmt.Errorf("data: token shard %s: %w", path, err)
	}
	return nil
}

// WriteFileAtomic writes b to path so that a reader sees the old file or the whole new one,
// never part: a temporary file beside it (mode 0644, not CreateTemp's 0600), synced, then renamed
// over path.
func WriteFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}

// Tokens is a language-modelling data set over token shards: with context T, shard s of n_s
// tokens has floor((n_s-1)/T) windows, window i the inputs Tokens[i*T : i*T+T] and the targets one
// token on; windows never cross shards, and one epoch reads every token once. Sample j is the
// j-th window counting through the shards in name order. Ranks take disjoint windows through the
// Loader's sharding, as for every data set.
type Tokens struct {
	Shards []*Shard
	T      int
	starts []int // starts[s] is the first sample of shard s; starts[len] the total
}

// LoadTokens opens the shards that path names (a directory or a glob, see above) and returns the
// train and eval sets with context T; eval is nil when there are no eval shards. Every token is
// checked against vocab.
func LoadTokens(path string, vocab, T int) (train, eval *Tokens, err error) {
	if T < 1 {
		return nil, nil, fmt.Errorf("data: context length %d", T)
	}
	pattern := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		pattern = filepath.Join(path, "*.bin")
	}
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, nil, fmt.Errorf("data: token shards %q: %w", path, err)
	}
	sort.Strings(files)
	var trainFiles, evalFiles []string
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "_val_") {
			evalFiles = append(evalFiles, f)
		} else {
			trainFiles = append(trainFiles, f)
		}
	}
	if len(trainFiles) == 0 {
		return nil, nil, fmt.Errorf("data: no train token shards at %q (want <prefix>_train_NNNNNN.bin files; `ddpbench tokenize` writes them)", path)
	}
	open := func(files []string) (*Tokens, error) {
		ts := &Tokens{T: T}
		for _, f := range files {
			s, err := OpenShard(f, vocab)
			if err != nil {
				ts.Close()
				return nil, err
			}
			ts.Shards = append(ts.Shards, s)
		}
		ts.index()
		if ts.Len() == 0 {
			ts.Close()
			return nil, fmt.Errorf("data: token shards %s hold no window of %d+1 tokens", strings.Join(files, ", "), T)
		}
		return ts, nil
	}
	if train, err = open(trainFiles); err != nil {
		return nil, nil, err
	}
	if len(evalFiles) > 0 {
		if eval, err = open(evalFiles); err != nil {
			train.Close()
			return nil, nil, err
		}
	}
	return train, eval, nil
}

func (ts *Tokens) index() {
	ts.starts = make([]int, len(ts.Shards)+1)
	for i, s := range ts.Shards {
		n := 0
		if len(s.Tokens) >= 2 {
			n = (len(s.Tokens) - 1) / ts.T
		}
		ts.starts[i+1] = ts.starts[i] + n
	}
}

// Close unmaps every shard.
func (ts *Tokens) Close() error {
	var errs []error
	for _, s := range ts.Shards {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Len is the number of windows in all shards.
func (ts *Tokens) Len() int { return ts.starts[len(ts.starts)-1] }

func (ts *Tokens) Layout() Layout { return Layout{SeqLen: ts.T} }

// Fill writes windows idx into b.Tokens and b.Targets.
func (ts *Tokens) Fill(b *Batch, idx []int) {
	T := ts.T
	for i, j := range idx {
		s := sort.SearchInts(ts.starts, j+1) - 1 // the shard whose windows hold j
		w := j - ts.starts[s]
		src := ts.Shards[s].Tokens[w*T : w*T+T+1]
		tok, tgt := b.Tokens[i*T:(i+1)*T], b.Targets[i*T:(i+1)*T]
		for k := range T {
			tok[k] = int32(src[k])
			tgt[k] = int32(src[k+1])
		}
	}
	b.Size = len(idx)
	b.T = T
}

var _ Dataset = (*Tokens)(nil)
