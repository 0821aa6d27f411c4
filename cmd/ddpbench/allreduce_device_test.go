package main

import (
	"strings"
	"testing"
)

// --device is checked before any rank starts: an unknown device is refused, naming the flag; the
// CUDA device takes every wire (it uploads bf16 since issue 32's stage 2).
func TestAllReduceBench_deviceFlag(t *testing.T) {
	for args, want := range map[string]string{
		"--device tpu": `--device "tpu": want cpu or cuda`,
	} {
		err := runAllReduceBench(append([]string{"--nproc", "2"}, strings.Fields(args)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	f := benchFlags{device: "cuda", wires: []string{"f32", "f16", "bf16"}}
	if err := f.checkDevice(); err != nil {
		t.Errorf("--device cuda --wire f32,f16,bf16: %v", err)
	}
}

// Without the cuda build tag there is no CUDA device: a rank's openDevice says so.
func TestAllReduceBench_deviceCUDAWithoutTheBuild(t *testing.T) {
	f := benchFlags{device: "cuda"}
	d, err := f.openDevice(0)
	if err == nil {
		if c, ok := d.(interface{ Close() error }); ok {
			c.Close()
		}
		t.Skip("this build opens a CUDA device")
	}
	if !strings.Contains(err.Error(), "cuda") {
		t.Fatalf("--device cuda without a CUDA build: %v, want an error naming cuda", err)
	}
	f.device = "cpu"
	if d, err := f.openDevice(0); d != nil || err != nil {
		t.Fatalf("--device cpu opened %v, %v", d, err)
	}
}
