package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/checkpoint"
)

func init() {
	register("export", subcommand{summary: "write a checkpoint in Hugging Face GPT-2's layout (--format hf)", run: runExport})
}

// ddptrain export --checkpoint DIR --format hf --out OUT [--check-logits] [--config FILE]
func runExport(args []string) int {
	fs := pflag.NewFlagSet("export", pflag.ContinueOnError)
	fs.SortFlags = false
	ckpt := fs.String("checkpoint", "", "a checkpoint step directory, or a checkpoint.dir (its newest checkpoint that verifies)")
	var opt checkpoint.ExportOptions
	fs.StringVar(&opt.Format, "format", "hf", "hf: Hugging Face GPT2LMHeadModel (model.safetensors + config.json)")
	fs.StringVar(&opt.Out, "out", "", "directory to write")
	fs.BoolVar(&opt.CheckLogits, "check-logits", false, "also write goddp_logits.json (goddp's logits of a fixed prompt) for scripts/check_hf_export.py")
	configPath := fs.String("config", "", "the run's YAML, only for a checkpoint written before checkpoints carried their model's config.json")
	sets := fs.StringArray("set", nil, "override a key of --config")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ddptrain export --checkpoint DIR --format hf --out OUT [--check-logits]\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return fail("export", exitUsage, err)
	}
	if *ckpt == "" || opt.Out == "" {
		fs.Usage()
		return exitUsage
	}
	if *configPath != "" {
		cfg, err := worker.LoadConfig(*configPath, *sets)
		if err != nil {
			return fail("export", exitUsage, err)
		}
		spec, err := worker.ModelSpec(cfg)
		if err != nil {
			return fail("export", exitUsage, err)
		}
		opt.Spec = &spec
	} else if len(*sets) > 0 {
		return fail("export", exitUsage, errors.New("--set needs --config"))
	}
	res, err := checkpoint.Export(*ckpt, opt)
	if err != nil {
		return fail("export", exitFailed, err)
	}
	s := res.Spec
	fmt.Fprintf(os.Stderr, "exported %s (step %d: gpt layers %d width %d heads %d context %d vocab %d of %d) as Hugging Face GPT2LMHeadModel\n",
		res.Checkpoint, res.Step, s.Layers, s.Width, s.Heads, s.Context, s.VocabTokens(), s.Vocab)
	for _, f := range res.Files {
		fmt.Println(f)
	}
	return 0
}
