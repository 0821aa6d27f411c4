package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker/data"
)

// ddpbench images --synthetic-jpeg writes a folder the image-folder loader reads, and --bench
// measures it at each worker count; a bad --workers list and a missing mode are refused.
func TestImages_syntheticThenBench(t *testing.T) {
	root := filepath.Join(t.TempDir(), "jpegs")
	if err := runImages([]string{"--synthetic-jpeg", root, "--count", "12"}); err != nil {
		t.Fatal(err)
	}
	tr, va, err := data.LoadImageFolder(root, data.ImageFolderConfig{Size: 16, Mean: data.ImageNetMean, Std: data.ImageNetStd})
	if err != nil || tr.Len() != 12 || va.Len() != 12 || len(tr.Classes) != 10 {
		t.Fatalf("the synthetic folder: %v", err)
	}
	if err := runImages([]string{"--bench", root, "--workers", "1,2", "--size", "16", "--batch", "4", "--seconds", "0.05"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--bench", root, "--workers", "0"}, {}, {"--bench", root, "--from-mnist", root}} {
		if err := runImages(args); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
