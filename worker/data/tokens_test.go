package data

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEncoder_gpt2KnownIDs(t *testing.T) {
	enc, err := NewEncoder("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		ids  []int
	}{
		{"Hello world", []int{15496, 995}},
		{" the", []int{262}},
		{"\n\n", []int{628}},
	} {
		got, err := enc.Encode(tc.text)
		if err != nil || !slices.Equal(got, tc.ids) {
			t.Errorf("Encode(%q) = %v, %v; want %v", tc.text, got, err, tc.ids)
		}
		back, err := enc.Decode(got)
		if err != nil || back != tc.text {
			t.Errorf("Decode(%v) = %q, %v", got, back, err)
		}
	}
	if enc.Vocab() != 50257 || enc.EOT() != 50256 {
		t.Errorf("vocab %d, eot %d", enc.Vocab(), enc.EOT())
	}
	if _, err := enc.Decode([]int{50257}); err == nil {
		t.Error("an id outside the vocabulary decoded")
	}
	if _, err := NewEncoder("gpt5"); err == nil || !strings.Contains(err.Error(), "gpt5") {
		t.Errorf("unknown encoding: %v", err)
	}
}

func opticks(t testing.TB) string {
	p, err := DefaultPath("text") // the Go toolchain's copy of Newton's Opticks (discover.go)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// Tokenize writes shards whose ids equal encoding each input whole (blocks are cut only where the
// encoding cannot see it), split train/eval by the tail of each input, EOT before each document.
func TestTokenize_equalsWholeEncoding(t *testing.T) {
	enc, _ := NewEncoder("gpt2")
	src := opticks(t)
	text, _ := os.ReadFile(src)
	text = text[:200_000] // keeps the test quick; still many blocks below
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, text, 0o644)
	out := t.TempDir()
	old := tokenizeBlockSize
	tokenizeBlockSize = 4096 // many blocks and cuts
	defer func() { tokenizeBlockSize = old }()
	st, err := Tokenize(enc, []string{in, in}, TokenizeOptions{OutDir: out, Prefix: "op", EvalFraction: 0.1, ShardTokens: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	var trainIDs, evalIDs []int
	for _, f := range st.Files {
		s, err := OpenShard(f, enc.Vocab())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range s.Tokens {
			if strings.Contains(f, "_val_") {
				evalIDs = append(evalIDs, int(id))
			} else {
				trainIDs = append(trainIDs, int(id))
			}
		}
		s.Close()
	}
	// The whole encoding of each side, as the cut chose it: find the cut from the train ids.
	eot := enc.EOT()
	docs := splitDocs(trainIDs, eot)
	evalDocs := splitDocs(evalIDs, eot)
	if len(docs) != 2 || len(evalDocs) != 2 {
		t.Fatalf("%d train and %d eval documents, want 2 and 2", len(docs), len(evalDocs))
	}
	trainText, _ := enc.Decode(docs[0])
	if !strings.HasPrefix(string(text), trainText) {
		t.Fatal("the train part is not the start of the input")
	}
	cut := len(trainText)
	if frac := float64(len(text)-cut) / float64(len(text)); frac < 0.09 || frac > 0.11 {
		t.Errorf("eval part is %.3f of the input, want about 0.1", frac)
	}
	whole, _ := enc.Encode(string(text[:cut]))
	wholeEval, _ := enc.Encode(string(text[cut:]))
	if !slices.Equal(docs[0], whole) || !slices.Equal(docs[1], whole) {
		t.Error("train ids differ from encoding the train part whole")
	}
	if !slices.Equal(evalDocs[0], wholeEval) {
		t.Error("eval ids differ from encoding the eval part whole")
	}
	if len(st.Files) < 3 {
		t.Errorf("%d shards: ShardTokens was not applied", len(st.Files))
	}
}

// splitDocs cuts ids at each EOT (which starts a document).
func splitDocs(ids []int, eot int) [][]int {
	var docs [][]int
	for _, id := range ids {
		if id == eot {
			docs = append(docs, nil)
			continue
		}
		docs[len(docs)-1] = append(docs[len(docs)-1], id)
	}
	return docs
}

func TestShard_roundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x_train_000000.bin")
	toks := []uint16{1, 2, 3, 50256, 7}
	if err := WriteShard(p, toks); err != nil {
		t.Fatal(err)
	}
	s, err := OpenShard(p, 50257)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Tokens, toks) {
		t.Fatalf("read %v, wrote %v", s.Tokens, toks)
	}
	s.Close()
	raw, _ := os.ReadFile(p)
	bad := func(name string, b []byte, vocab int, want string) {
		t.Helper()
		q := filepath.Join(dir, name)
		os.WriteFile(q, b, 0o644)
		_, err := OpenShard(q, vocab)
		if err == nil || !strings.Contains(err.Error(), q) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming the file and %q", name, err, want)
		}
	}
	bad("truncated.bin", raw[:len(raw)-1], 50257, "truncated")
	bad("short.bin", raw[:100], 50257, "header")
	wrong := slices.Clone(raw)
	binary.LittleEndian.PutUint32(wrong, 12345)
	bad("magic.bin", wrong, 50257, "magic")
	bad("vocab.bin", raw, 100, "outside the vocabulary")
	// An id equal to the vocabulary size is outside it (the largest id is vocab-1): 50256 read with
	// a vocabulary of 50256 is refused, where 50257 above accepted it.
	bad("vocab-edge.bin", raw, 50256, "token 50256 at position 3 is outside the vocabulary of 50256")
	// No temp files left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestTokens_windowsAcrossShards(t *testing.T) {
	dir := t.TempDir()
	for i, n := range []int{10, 1, 7} { // the middle shard holds no window
		toks := make([]uint16, n)
		for j := range toks {
			toks[j] = uint16(100*i + j)
		}
		WriteShard(filepath.Join(dir, "d_train_00000"+string(rune('0'+i))+".bin"), toks)
	}
	WriteShard(filepath.Join(dir, "d_val_000000.bin"), []uint16{5, 6, 7, 8, 9})
	train, eval, err := LoadTokens(dir, 1000, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer train.Close()
	defer eval.Close()
	if train.Len() != 3+0+2 || eval.Len() != 1 {
		t.Fatalf("train %d windows, eval %d", train.Len(), eval.Len())
	}
	b := newBatch(train.Layout(), 5, HeapAllocator{})
	train.Fill(b, []int{4, 0, 3})
	want := [][]int32{{203, 204, 205}, {0, 1, 2}, {200, 201, 202}}
	for i, w := range want {
		if got := b.Tokens[i*3 : i*3+3]; !slices.Equal(got, w) {
			t.Errorf("window %d: %v, want %v", i, got, w)
		}
		if got := b.Targets[i*3 : i*3+3]; !slices.Equal(got, []int32{w[0] + 1, w[1] + 1, w[2] + 1}) {
			t.Errorf("targets %d: %v", i, got)
		}
	}
	if _, _, err := LoadTokens(filepath.Join(dir, "nothing*.bin"), 1000, 3); err == nil || !strings.Contains(err.Error(), "no train token shards") {
		t.Errorf("empty glob: %v", err)
	}
}

// Two ranks reading token shards through the Loader get disjoint windows that together are one
// epoch's worth, and each window holds the shard's tokens at its place (targets one token on).
func TestTokens_ranksReadDisjointWindows(t *testing.T) {
	dir := t.TempDir()
	const T = 4
	for s, n := range []int{41, 29} { // 10 and 7 windows
		toks := make([]uint16, n)
		for i := range toks {
			toks[i] = uint16(1000*s + i)
		}
		if err := WriteShard(filepath.Join(dir, fmt.Sprintf("x_train_%06d.bin", s)), toks); err != nil {
			t.Fatal(err)
		}
	}
	train, _, err := LoadTokens(dir, 5000, T)
	if err != nil {
		t.Fatal(err)
	}
	defer train.Close()
	if train.Len() != 17 {
		t.Fatalf("%d windows, want 17", train.Len())
	}
	seen := map[int]int{}
	for rank := 0; rank < 2; rank++ {
		l, err := NewLoader(train, LoaderConfig{MicroBatch: 2, Rank: rank, World: 2, Seed: 3, Shuffle: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < l.StepsPerEpoch(); i++ {
			b, err := l.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for k, j := range b.Indices {
				if r, dup := seen[j]; dup {
					t.Fatalf("window %d read by rank %d and rank %d", j, r, rank)
				}
				seen[j] = rank
				s, w := 0, j
				if j >= 10 {
					s, w = 1, j-10
				}
				for p := 0; p < T; p++ {
					if b.Tokens[k*T+p] != int32(1000*s+w*T+p) || b.Targets[k*T+p] != int32(1000*s+w*T+p+1) {
						t.Fatalf("window %d: tokens %v targets %v", j, b.Tokens[k*T:k*T+T], b.Targets[k*T:k*T+T])
					}
				}
			}
			l.Release(b)
		}
		l.Close()
	}
	if len(seen) != 16 { // 4 steps of 2×2 windows: the 17th is the epoch's remainder
		t.Errorf("%d windows read in one epoch by both ranks, want 16", len(seen))
	}
}
