package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ErrNoGPU is returned by ResolveNProc for "gpu" when no GPU is visible.
var ErrNoGPU = errors.New("launcher: no GPU visible")

// GPUProbe reports how many GPUs the workers of this host can see. Its fields are the outside world,
// so tests replace them; DefaultGPUProbe uses the real ones.
type GPUProbe struct {
	Getenv func(string) (string, bool)            // os.LookupEnv
	SMI    func() (string, error)                 // output of `nvidia-smi -L`; an error when absent
	Glob   func(pattern string) ([]string, error) // filepath.Glob
}

// DefaultGPUProbe looks at the real environment, nvidia-smi and /proc.
func DefaultGPUProbe() GPUProbe {
	return GPUProbe{
		Getenv: os.LookupEnv,
		SMI: func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "nvidia-smi", "-L").Output()
			return string(out), err
		},
		Glob: filepath.Glob,
	}
}

// Count returns the number of GPUs a worker can use, in this order of authority:
//  1. CUDA_VISIBLE_DEVICES when set: the devices it lists (see ParseVisibleDevices), even 0;
//  2. `nvidia-smi -L`: its "GPU n:" lines;
//  3. the directories /proc/driver/nvidia/gpus/*;
//  4. otherwise 0.
func (p GPUProbe) Count() int {
	if v, ok := p.Getenv("CUDA_VISIBLE_DEVICES"); ok {
		return len(ParseVisibleDevices(v))
	}
	if p.SMI != nil {
		if out, err := p.SMI(); err == nil {
			if n := CountSMIGPUs(out); n > 0 {
				return n
			}
		}
	}
	if p.Glob != nil {
		if m, err := p.Glob("/proc/driver/nvidia/gpus/*"); err == nil {
			return len(m)
		}
	}
	return 0
}

// ParseVisibleDevices returns the devices a CUDA_VISIBLE_DEVICES value makes visible, as CUDA
// reads it: comma-separated indices or GPU-/MIG- UUIDs, up to (not including) the first invalid
// entry; so "" and "-1" hide every GPU and "0,1,-1,2" shows two.
func ParseVisibleDevices(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if strings.HasPrefix(f, "GPU-") || strings.HasPrefix(f, "MIG-") {
			out = append(out, f)
			continue
		}
		if n, err := strconv.Atoi(f); err != nil || n < 0 {
			break
		}
		out = append(out, f)
	}
	return out
}

// CountSMIGPUs counts the "GPU n: name (UUID: ...)" lines of `nvidia-smi -L` output.
func CountSMIGPUs(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "GPU ") {
			n++
		}
	}
	return n
}

// ResolveNProc turns a --nproc-per-node value into a worker count:
//   - a positive integer: itself;
//   - "gpu": one per visible GPU, ErrNoGPU when there is none;
//   - "cpu": one per CPU (runtime.NumCPU);
//   - "auto": as torchrun: one per visible GPU, or one per CPU when there is no GPU.
//
// gpus is the visible GPU count (GPUProbe.Count), passed in so that this stays pure.
func ResolveNProc(v string, gpus int) (int, error) {
	switch v {
	case "gpu":
		if gpus == 0 {
			return 0, ErrNoGPU
		}
		return gpus, nil
	case "cpu":
		return runtime.NumCPU(), nil
	case "auto":
		if gpus > 0 {
			return gpus, nil
		}
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("launcher: --nproc-per-node %q: want a positive integer, gpu, cpu or auto", v)
	}
	return n, nil
}

// GPUSharing describes, for nproc workers on gpus visible GPUs, which local ranks share a GPU
// (local rank r uses GPU r % gpus). It returns "" when no GPU is shared or there is no GPU.
// visible, when not nil, names the devices (CUDA_VISIBLE_DEVICES entries) for the message.
func GPUSharing(nproc, gpus int, visible []string) string {
	if gpus <= 0 || nproc <= gpus {
		return ""
	}
	var parts []string
	for g := 0; g < gpus; g++ {
		var ranks []string
		for r := g; r < nproc; r += gpus {
			ranks = append(ranks, strconv.Itoa(r))
		}
		if len(ranks) < 2 {
			continue
		}
		name := fmt.Sprintf("GPU %d", g)
		if g < len(visible) && visible[g] != strconv.Itoa(g) {
			name += fmt.Sprintf(" (CUDA_VISIBLE_DEVICES entry %s)", visible[g])
		}
		parts = append(parts, fmt.Sprintf("%d workers share %s (local ranks %s)", len(ranks), name, strings.Join(ranks, ",")))
	}
	return fmt.Sprintf("%d workers on %d GPU(s): %s", nproc, gpus, strings.Join(parts, "; "))
}
