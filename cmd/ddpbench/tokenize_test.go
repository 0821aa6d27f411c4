package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker/data"
)

func TestTokenizeCommand(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "hello.txt")
	os.WriteFile(in, []byte("Hello world"), 0o644)
	if err := runTokenize([]string{"--encoding", "gpt2", "--in", in, "--out", filepath.Join(dir, "out")}); err != nil {
		t.Fatal(err)
	}
	s, err := data.OpenShard(filepath.Join(dir, "out", "tokens_train_000000.bin"), 50257)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Tokens; len(got) != 3 || got[0] != 50256 || got[1] != 15496 || got[2] != 995 {
		t.Fatalf("shard holds %v, want [50256 15496 995] (EOT, Hello, world)", got)
	}
	for _, bad := range [][]string{{"--in", in}, {"--out", dir}, {"--in", in, "--out", dir, "--encoding", "nope"}, {"--in", in, "--out", dir, "--eval-fraction", "1"}} {
		if err := runTokenize(bad); err == nil {
			t.Errorf("%s: accepted", strings.Join(bad, " "))
		}
	}
}
