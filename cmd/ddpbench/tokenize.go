package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/goddp/goddp/worker/data"
)

func init() {
	register("tokenize", subcommand{summary: "text files to token shards (llm.c's format) for data.kind: tokens", run: runTokenize})
}

// ddpbench tokenize --encoding gpt2 --in FILE... --out DIR [--eval-fraction F]
func runTokenize(args []string) error {
	fs := pflag.NewFlagSet("tokenize", pflag.ContinueOnError)
	encName := fs.String("encoding", "gpt2", "tokenizer: gpt2 (GPT-2's byte-level BPE, 50257 ids)")
	ins := fs.StringSlice("in", nil, "input text files (each one document; repeat or comma-separate)")
	out := fs.String("out", "", "directory for the shards")
	prefix := fs.String("prefix", "tokens", "shard names: PREFIX_train_NNNNNN.bin, PREFIX_val_NNNNNN.bin")
	evalFrac := fs.Float64("eval-fraction", 0, "the tail of each input (by bytes) that goes to the eval shards, 0 <= F < 1")
	shardTokens := fs.Int("shard-tokens", 100_000_000, "tokens per shard")
	if err := fs.Parse(args); err != nil {
		return err
	}
	*ins = append(*ins, fs.Args()...)
	if len(*ins) == 0 || *out == "" {
		return errors.New("--in FILE... and --out DIR are required")
	}
	if *shardTokens <= 0 {
		return fmt.Errorf("--shard-tokens %d: want a positive count", *shardTokens)
	}
	enc, err := data.NewEncoder(*encName)
	if err != nil {
		return err
	}
	var total int64
	for _, in := range *ins {
		fi, err := os.Stat(in)
		if err != nil {
			return err
		}
		total += fi.Size()
	}
	opt := data.TokenizeOptions{OutDir: *out, Prefix: *prefix, EvalFraction: *evalFrac, ShardTokens: *shardTokens}
	if term.IsTerminal(int(os.Stderr.Fd())) && total > 8<<20 {
		bar := progressbar.DefaultBytes(total, "tokenize")
		opt.Progress = func(n int64) { bar.Set64(n) }
		defer bar.Finish()
	}
	start := time.Now()
	st, err := data.Tokenize(enc, *ins, opt)
	if err != nil {
		return err
	}
	for _, f := range st.Files {
		fmt.Println(f)
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "%s: %d train and %d eval tokens from %d bytes in %d shards, %.1fs (%.1f MB/s)\n",
		enc.Name(), st.TrainTokens, st.EvalTokens, total, len(st.Files), secs, float64(total)/secs/1e6)
	return nil
}
