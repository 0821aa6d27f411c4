package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker/data"
)

// writeTokenShards writes a train and an eval shard of a small synthetic language over vocab ids
// (a repeating pattern with some noise, so that a model can learn it) into a new directory.
func writeTokenShards(t *testing.T, vocab, trainTokens int) string {
	t.Helper()
	dir := t.TempDir()
	gen := func(n int, seed int) []uint16 {
		out := make([]uint16, n)
		x := uint32(seed)
		for i := range out {
			x = x*1664525 + 1013904223
			out[i] = uint16((i*3 + int(x>>28)) % vocab)
		}
		return out
	}
	if err := data.WriteShard(filepath.Join(dir, "syn_train_000000.bin"), gen(trainTokens, 1)); err != nil {
		t.Fatal(err)
	}
	if err := data.WriteShard(filepath.Join(dir, "syn_val_000000.bin"), gen(trainTokens/8, 2)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tokensGPT is tinyGPT on token shards: vocabulary 64 padded to 72, context 32.
func tokensGPT(t *testing.T, dir string, sets ...string) *Config {
	return tinyGPT(t, append([]string{"data.kind=tokens", "data.path=" + dir, "model.vocab=72", "model.vocab_used=64",
		"train.micro_batch=4", "model.dropout=0"}, sets...)...)
}

// data.kind tokens trains, evaluates on the val shard, and a run killed after a checkpoint
// resumes where the data stream was, ending bit-identical to the uninterrupted run.
func TestTokens_trainAndResumeExactly(t *testing.T) {
	dir := writeTokenShards(t, 64, 4000)
	straight, err := Run(context.Background(), tokensGPT(t, dir, "train.max_steps=6"), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if !(straight.EvalLoss > 0 && straight.EvalLoss < 10) {
		t.Fatalf("eval loss %v", straight.EvalLoss)
	}
	ck := filepath.Join(t.TempDir(), "ck")
	planted := errors.New("planted")
	cfg := tokensGPT(t, dir, "train.max_steps=6", "checkpoint.dir="+ck, "checkpoint.every=2")
	_, err = Run(context.Background(), cfg, Options{Logger: quiet(), FaultHook: func(step int) error {
		if step == 5 {
			return planted
		}
		return nil
	}})
	if !errors.Is(err, planted) {
		t.Fatalf("Run = %v, want the planted failure", err)
	}
	resumed, err := Run(context.Background(), cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.ParamSHA256 != straight.ParamSHA256 {
		t.Errorf("resumed run ends with %.12s, uninterrupted %.12s", resumed.ParamSHA256, straight.ParamSHA256)
	}
}

// A shard that is truncated, is not a token shard, or holds an id outside the vocabulary stops
// the run at New, naming the file; so does a directory without eval shards.
func TestTokens_brokenShardRefusedNamingTheFile(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(path string) error
		want  string
	}{
		{"truncated", func(p string) error { return os.Truncate(p, data.ShardHeaderSize+100) }, "truncated"},
		{"wrong magic", func(p string) error {
			return patch(p, 0, binary.LittleEndian.AppendUint32(nil, 12345))
		}, "magic 12345"},
		{"out of vocabulary", func(p string) error {
			// id 70: inside model.vocab 72, outside model.vocab_used 64
			return patch(p, data.ShardHeaderSize+2*17, binary.LittleEndian.AppendUint16(nil, 70))
		}, "token 70 at position 17 is outside the vocabulary of 64"},
		{"no eval shard", func(p string) error {
			return os.Remove(filepath.Join(filepath.Dir(p), "syn_val_000000.bin"))
		}, "no eval shards"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTokenShards(t, 64, 2000)
			shard := filepath.Join(dir, "syn_train_000000.bin")
			if err := c.spoil(shard); err != nil {
				t.Fatal(err)
			}
			tr, err := New(context.Background(), tokensGPT(t, dir), Options{Logger: quiet()})
			if err == nil {
				tr.Close()
				t.Fatal("New accepted the broken shard")
			}
			if !strings.Contains(err.Error(), c.want) || (c.name != "no eval shard" && !strings.Contains(err.Error(), shard)) {
				t.Errorf("error %q, want it to name %s and say %q", err, shard, c.want)
			}
		})
	}
}

// patch overwrites path's bytes at off.
func patch(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("patch %s: %w", path, err)
	}
	return nil
}
