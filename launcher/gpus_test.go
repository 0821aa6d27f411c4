package launcher

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParseVisibleDevices(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"-1", nil},
		{"0", []string{"0"}},
		{"0,1", []string{"0", "1"}},
		{"3, 1", []string{"3", "1"}},
		{"0,1,-1,2", []string{"0", "1"}},
		{"GPU-8a1b,MIG-77", []string{"GPU-8a1b", "MIG-77"}},
		{"nodev", nil},
	}
	for _, tt := range tests {
		if got := ParseVisibleDevices(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("ParseVisibleDevices(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestGPUProbe_Count(t *testing.T) {
	smi := "GPU 0: NVIDIA H200 (UUID: GPU-a)\n  MIG 1g.18gb Device 0: (UUID: MIG-b)\nGPU 1: NVIDIA H200 (UUID: GPU-c)\n"
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	noSMI := func() (string, error) { return "", errors.New("not found") }
	withSMI := func() (string, error) { return smi, nil }
	glob := func(n int) func(string) ([]string, error) {
		return func(string) ([]string, error) { return make([]string, n), nil }
	}
	tests := []struct {
		name string
		p    GPUProbe
		want int
	}{
		{"CUDA_VISIBLE_DEVICES wins", GPUProbe{env(map[string]string{"CUDA_VISIBLE_DEVICES": "1"}), withSMI, glob(8)}, 1},
		{"CUDA_VISIBLE_DEVICES empty hides all", GPUProbe{env(map[string]string{"CUDA_VISIBLE_DEVICES": ""}), withSMI, glob(8)}, 0},
		{"nvidia-smi", GPUProbe{env(nil), withSMI, glob(8)}, 2},
		{"proc", GPUProbe{env(nil), noSMI, glob(3)}, 3},
		{"nothing", GPUProbe{env(nil), noSMI, glob(0)}, 0},
	}
	for _, tt := range tests {
		if got := tt.p.Count(); got != tt.want {
			t.Errorf("%s: Count() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestResolveNProc(t *testing.T) {
	cpus := runtime.NumCPU()
	tests := []struct {
		v       string
		gpus    int
		want    int
		wantErr string
	}{
		{"4", 0, 4, ""},
		{"4", 2, 4, ""},
		{"gpu", 2, 2, ""},
		{"gpu", 0, 0, "no GPU visible"},
		{"auto", 8, 8, ""},
		{"auto", 0, cpus, ""},
		{"cpu", 8, cpus, ""},
		{"0", 0, 0, "positive integer"},
		{"-2", 0, 0, "positive integer"},
		{"many", 0, 0, "positive integer"},
	}
	for _, tt := range tests {
		got, err := ResolveNProc(tt.v, tt.gpus)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ResolveNProc(%q, %d) error %v, want one with %q", tt.v, tt.gpus, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResolveNProc(%q, %d) = %d, %v; want %d", tt.v, tt.gpus, got, err, tt.want)
		}
	}
}

func TestGPUSharing(t *testing.T) {
	if s := GPUSharing(2, 2, nil); s != "" {
		t.Errorf("2 on 2: %q, want none", s)
	}
	if s := GPUSharing(2, 0, nil); s != "" {
		t.Errorf("CPU: %q, want none", s)
	}
	s := GPUSharing(2, 1, nil)
	if !strings.Contains(s, "2 workers share GPU 0 (local ranks 0,1)") {
		t.Errorf("2 on 1: %q", s)
	}
	s = GPUSharing(3, 2, []string{"5", "7"})
	if !strings.Contains(s, "2 workers share GPU 0 (CUDA_VISIBLE_DEVICES entry 5) (local ranks 0,2)") || strings.Contains(s, "GPU 1") {
		t.Errorf("3 on 2: %q", s)
	}
}
