package data

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tiktoken-go/tokenizer"
)

// Encoder is a tokenizer: text to token ids and back.
type Encoder interface {
	Encode(text string) ([]int, error)
	Decode(ids []int) (string, error)
	Vocab() int // ids are in [0, Vocab())
	EOT() int   // the end-of-text id that separates documents
	Name() string
}

// NewEncoder returns the named encoding. "gpt2" (also "r50k_base") is GPT-2's byte-level BPE,
// 50257 ids with <|endoftext|> = 50256, from github.com/tiktoken-go/tokenizer, which compiles
// the merge table into the binary: nothing is downloaded.
func NewEncoder(name string) (Encoder, error) {
	switch name {
	case "gpt2", "r50k_base":
		c, err := tokenizer.Get(tokenizer.R50kBase)
		if err != nil {
			return nil, fmt.Errorf("data: encoding %s: %w", name, err)
		}
		return &bpe{c: c, name: "gpt2", vocab: 50257, eot: 50256}, nil
	}
	return nil, fmt.Errorf("data: unknown encoding %q (want gpt2)", name)
}

type bpe struct {
	c          tokenizer.Codec
	name       string
	vocab, eot int
}

func (e *bpe) Encode(text string) ([]int, error) {
	ids, _, err := e.c.Encode(text)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out, nil
}

func (e *bpe) Decode(ids []int) (string, error) {
	u := make([]uint, len(ids))
	for i, id := range ids {
		if id < 0 || id >= e.vocab {
			return "", fmt.Errorf("data: token %d is outside the %s vocabulary of %d", id, e.name, e.vocab)
		}
		u[i] = uint(id)
	}
	return e.c.Decode(u)
}

func (e *bpe) Vocab() int   { return e.vocab }
func (e *bpe) EOT() int     { return e.eot }
func (e *bpe) Name() string { return e.name }

// TokenizeOptions says how Tokenize writes shards.
type TokenizeOptions struct {
	OutDir       string
	Prefix       string  // shard names: <Prefix>_train_NNNNNN.bin, <Prefix>_val_NNNNNN.bin
	EvalFraction float64 // the tail of each input, by bytes, goes to the eval shards; 0: none
	ShardTokens  int     // tokens per shard (the last of each split may be shorter); default 100M
	// Progress, if set, is told the input bytes read so far, now and then.
	Progress func(bytes int64)
}

// TokenizeStats is what Tokenize wrote.
type TokenizeStats struct {
	TrainTokens, EvalTokens int64
	Files                   []string
}

// Tokenize encodes each input file as a document (an EOT id before it, as llm.c's data scripts
// do) and writes the ids as shards (tokens.go). Inputs are read in blocks cut only where the
// encoding cannot see the cut (between a letter and a space that precedes a letter: no piece of
// the pre-tokenizer spans it), so the ids equal those of encoding each file whole, in bounded
// memory.
func Tokenize(enc Encoder, inputs []string, opt TokenizeOptions) (TokenizeStats, error) {
	var st TokenizeStats
	if opt.Prefix == "" {
		opt.Prefix = "tokens"
	}
	if opt.ShardTokens <= 0 {
		opt.ShardTokens = 100_000_000
	}
	if opt.EvalFraction < 0 || opt.EvalFraction >= 1 {
		return st, fmt.Errorf("data: eval fraction %g: want 0 <= f < 1", opt.EvalFraction)
	}
	if enc.Vocab() > 1<<16 {
		return st, fmt.Errorf("data: the %s vocabulary of %d does not fit uint16 shards", enc.Name(), enc.Vocab())
	}
	if err := os.MkdirAll(opt.OutDir, 0o755); err != nil {
		return st, fmt.Errorf("data: %w", err)
	}
	train := &shardWriter{dir: opt.OutDir, name: opt.Prefix + "_train", max: opt.ShardTokens, stats: &st}
	eval := &shardWriter{dir: opt.OutDir, name: opt.Prefix + "_val", max: opt.ShardTokens, stats: &st}
	var done int64
	for _, in := range inputs {
		f, err := os.Open(in)
		if err != nil {
			return st, fmt.Errorf("data: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return st, fmt.Errorf("data: %s: %w", in, err)
		}
		cut := fi.Size() - int64(float64(fi.Size())*opt.EvalFraction) // eval: the bytes from cut on
		if opt.EvalFraction == 0 {
			cut = fi.Size()
		}
		err = encodeFile(enc, bufio.NewReaderSize(f, 1<<20), cut, func(ids []int, evalPart bool) error {
			w := train
			if evalPart {
				w = eval
			}
			return w.add(ids)
		}, func(n int64) {
			if opt.Progress != nil {
				opt.Progress(done + n)
			}
		})
		f.Close()
		if err != nil {
			return st, fmt.Errorf("data: tokenizing %s: %w", in, err)
		}
		done += fi.Size()
	}
	if err := train.flush(); err != nil {
		return st, err
	}
	if err := eval.flush(); err != nil {
		return st, err
	}
	st.TrainTokens, st.EvalTokens = train.total, eval.total
	return st, nil
}

// tokenizeBlockSize is how much input is read at a time (a variable for tests).
var tokenizeBlockSize = 1 << 20

// encodeFile reads r in blocks, encodes them, and emits the ids: the bytes before cut to the train
// side, from cut on to the eval side (the cut moves to the next safe place; each side starts a
// document with EOT).
func encodeFile(enc Encoder, r io.Reader, cut int64, emit func(ids []int, eval bool) error, progress func(int64)) error {
	var pending []byte // read, not yet encoded
	var pos int64      // input bytes before pending
	started := [2]bool{}
	encode := func(end int) error {
		eval := pos >= cut
		ids, err := enc.Encode(string(pending[:end]))
		if err != nil {
			return err
		}
		side := 0
		if eval {
			side = 1
		}
		if !started[side] {
			started[side] = true
			ids = append([]int{enc.EOT()}, ids...)
		}
		pos += int64(end)
		pending = pending[end:]
		progress(pos)
		return emit(ids, eval)
	}
	buf := make([]byte, tokenizeBlockSize)
	for eof := false; !eof; {
		n, err := io.ReadFull(r, buf)
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			eof = true
		case err != nil:
			return err
		}
		pending = append(pending, buf[:n]...)
		for len(pending) > 0 {
			end := len(pending) // at the end of the input, everything
			if !eof {
				if end = safeCut(pending, len(pending)-tokenizeBlockSize/8); end < 0 {
					break // no safe place in the block's last eighth: read on
				}
			}
			if pos < cut && pos+int64(end) > cut { // the train part ends in here
				if c := safeCut(pending[:end], int(cut-pos)); c > 0 {
					end = c
				}
			}
			if err := encode(end); err != nil {
				return err
			}
			if !eof {
				break // the rest waits for the next block
			}
		}
		pending = append([]byte(nil), pending...) // do not pin the old block
	}
	return nil
}

// safeCut returns a position at or after from where text can be cut without changing its
// encoding: text[i-1] an ASCII letter, text[i] a space, text[i+1] an ASCII letter. No piece of
// GPT-2's pre-tokenizer spans such a place (a letter run cannot take a following space; a space
// followed by a letter starts a piece). -1 when there is none.
func safeCut(text []byte, from int) int {
	for i := max(from, 1); i+1 < len(text); i++ {
		if text[i] == ' ' && isASCIILetter(text[i-1]) && isASCIILetter(text[i+1]) {
			return i
		}
	}
	return -1
}

func isASCIILetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

// shardWriter buffers ids and writes a shard each max tokens.
type shardWriter struct {
	dir, name string
	max       int
	buf       []uint16
	n         int // shards written
	total     int64
	stats     *TokenizeStats
}

func (w *shardWriter) add(ids []int) error {
	for _, id := range ids {
		w.buf = append(w.buf, uint16(id))
		if len(w.buf) == w.max {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *shardWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	path := filepath.Join(w.dir, fmt.Sprintf("%s_%06d.bin", w.name, w.n))
	if err := WriteShard(path, w.buf); err != nil {
		return err
	}
	w.stats.Files = append(w.stats.Files, path)
	w.total += int64(len(w.buf))
	w.n++
	w.buf = w.buf[:0]
	return nil
}
