package model

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

func sampleTensors() []NamedTensor {
	return []NamedTensor{
		{Name: "w", DType: tensor.F32, Shape: []int{2, 3}, Data: F32Bytes([]float32{1, 2, 3, 4, 5, -6.5})},
		{Name: "b", DType: tensor.F32, Shape: []int{3}, Data: F32Bytes([]float32{0.5, 0, -1})},
		{Name: "h", DType: tensor.F16, Shape: []int{2}, Data: []byte{0x00, 0x3c, 0x00, 0xc0}}, // 1, -2
		{Name: "ids", DType: tensor.I32, Shape: []int{1, 2}, Data: I32Bytes([]int32{7, -8})},
		{Name: "scalar", DType: tensor.F32, Shape: []int{}, Data: F32Bytes([]float32{3})},
	}
}

func encodeST(t *testing.T, ts []NamedTensor, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, ts, meta); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSafetensors_roundTrip(t *testing.T) {
	meta := map[string]string{"format": "pt", "step": "12"}
	b := encodeST(t, sampleTensors(), meta)
	hn := binary.LittleEndian.Uint64(b)
	if (8+hn)%8 != 0 {
		t.Errorf("data section at %d, not 8-byte aligned", 8+hn)
	}
	ts, m, err := ReadSafetensors(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if m["format"] != "pt" || m["step"] != "12" {
		t.Errorf("meta %v", m)
	}
	names := []string{}
	for _, x := range ts {
		names = append(names, x.Name)
	}
	if strings.Join(names, ",") != "b,h,ids,scalar,w" {
		t.Errorf("names %v, want sorted", names)
	}
	for _, want := range sampleTensors() {
		var got *NamedTensor
		for i := range ts {
			if ts[i].Name == want.Name {
				got = &ts[i]
			}
		}
		if got == nil || got.DType != want.DType || !bytes.Equal(got.Data, want.Data) || len(got.Shape) != len(want.Shape) {
			t.Errorf("tensor %s: got %+v", want.Name, got)
		}
	}
	if v := BytesF32(ts[4].Data); v[5] != -6.5 {
		t.Errorf("w = %v", v)
	}
	// Same tensors in another order: same bytes.
	rev := sampleTensors()
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if !bytes.Equal(b, encodeST(t, rev, meta)) {
		t.Error("output depends on input order")
	}
}

func TestSafetensors_writeRejects(t *testing.T) {
	ts := sampleTensors()
	ts[1].Name = "w"
	if err := WriteSafetensors(&bytes.Buffer{}, ts, nil); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("duplicate: %v", err)
	}
	ts = sampleTensors()
	ts[0].Shape = []int{4, 3}
	if err := WriteSafetensors(&bytes.Buffer{}, ts, nil); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("size mismatch: %v", err)
	}
}

// rebuild writes a file with a hand-made header (data section given).
func rebuild(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	return append(append(b, header...), data...)
}

func TestSafetensors_corrupt(t *testing.T) {
	good := encodeST(t, sampleTensors(), nil)
	data8 := make([]byte, 8)
	cases := map[string]struct {
		file []byte
		want string
	}{
		"empty":           {nil, "no header length"},
		"huge header len": {append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, good[8:]...), "header length"},
		"truncated":       {good[:len(good)-3], "data_offsets"},
		"trailing":        {append(append([]byte(nil), good...), 1, 2, 3, 4), "after the last tensor"},
		"not json":        {rebuild("[1,2]", nil), "not a JSON object"},
		"bad dtype":       {rebuild(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, data8), `"a": unsupported dtype "F64"`},
		"size mismatch":   {rebuild(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, data8), `"a": shape [3]`},
		"out of range":    {rebuild(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, data8), `"a": data_offsets [0, 16] outside`},
		"overlap": {rebuild(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8),
			`"b": data_offsets [4, 8] overlaps`},
		"gap": {rebuild(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), `"a": data_offsets [4, 8] leaves a gap`},
		"duplicate": {rebuild(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8),
			`"a" appears twice`},
		"bad metadata": {rebuild(`{"__metadata__":{"k":1}}`, nil), "__metadata__"},
	}
	for name, c := range cases {
		_, _, err := ParseSafetensors(c.file)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "model: safetensors") {
			t.Errorf("%s: error %q, want it to contain %q", name, err, c.want)
		}
	}
}

// An independent reader of the format in plain Python (json + struct), per
// the specification, reads our file: header length, padding, offsets
// relative to the data section, little-endian values.
func TestSafetensors_pythonPlain(t *testing.T) {
	if exec.Command("python3", "-c", "import json, struct").Run() != nil {
		t.Skip("python3 not available")
	}
	p := filepath.Join(t.TempDir(), "ours.safetensors")
	os.WriteFile(p, encodeST(t, sampleTensors(), map[string]string{"format": "pt"}), 0o644)
	script := `
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
assert (8 + n) % 8 == 0
h = json.loads(b[8:8+n].decode("utf-8"))
data = b[8+n:]
assert h.pop("__metadata__") == {"format": "pt"}
w = h["w"]; s, e = w["data_offsets"]
assert w["dtype"] == "F32" and w["shape"] == [2, 3]
assert list(struct.unpack("<6f", data[s:e])) == [1, 2, 3, 4, 5, -6.5]
s, e = h["ids"]["data_offsets"]; assert struct.unpack("<2i", data[s:e]) == (7, -8)
s, e = h["h"]["data_offsets"]; assert struct.unpack("<2e", data[s:e]) == (1.0, -2.0)
assert h["scalar"]["shape"] == []
assert max(v["data_offsets"][1] for v in h.values()) == len(data)
`
	if out, err := exec.Command("python3", "-c", script, p).CombinedOutput(); err != nil {
		t.Fatalf("plain python reader rejected our file: %v\n%s", err, out)
	}
}

// If python3 has the safetensors package, check that it reads our file and
// that we read its output.
func TestSafetensors_python(t *testing.T) {
	if exec.Command("python3", "-c", "import safetensors.numpy, numpy").Run() != nil {
		t.Skip("python3 with safetensors and numpy not available")
	}
	dir := t.TempDir()
	ours := filepath.Join(dir, "ours.safetensors")
	theirs := filepath.Join(dir, "theirs.safetensors")
	os.WriteFile(ours, encodeST(t, sampleTensors(), map[string]string{"format": "np"}), 0o644)
	script := `
import sys, numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open
d = load_file(sys.argv[1])
assert d["w"].dtype == np.float32 and d["w"].shape == (2, 3) and d["w"][1, 2] == -6.5, d["w"]
assert d["h"].dtype == np.float16 and list(d["h"]) == [1.0, -2.0]
assert d["ids"].dtype == np.int32 and d["ids"].tolist() == [[7, -8]]
with safe_open(sys.argv[1], "np") as f:
    assert f.metadata() == {"format": "np"}
save_file({"z": np.arange(6, dtype=np.float32).reshape(3, 2), "a": np.array([1, 2], dtype=np.int32)}, sys.argv[2], metadata={"by": "py"})
`
	if out, err := exec.Command("python3", "-c", script, ours, theirs).CombinedOutput(); err != nil {
		t.Fatalf("python could not read our file: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(theirs)
	ts, meta, err := ParseSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if meta["by"] != "py" || len(ts) != 2 || ts[1].Name != "z" || BytesF32(ts[1].Data)[5] != 5 || BytesI32(ts[0].Data)[1] != 2 {
		t.Errorf("python's file read as %+v %v", ts, meta)
	}
}

// BF16 tensors write and read back byte for byte, encode with round-to-nearest-even as PyTorch
// does (golden bits below), and widen to f32 exactly; F16 widens exactly too.
func TestSafetensors_bf16(t *testing.T) {
	vals := []float32{1, -2, 3.140625, 1.00390625, 1.01171875, 65504, float32(math.Inf(-1)), 1e-40}
	// torch.tensor(vals).bfloat16().view(torch.int16): 1.00390625 is a tie (rounds down to even
	// 1.0), 1.01171875 a tie rounding up to 1.015625, 65504 rounds up to 65536, 1e-40 is a subnormal.
	want := []uint16{0x3f80, 0xc000, 0x4049, 0x3f80, 0x3f82, 0x4780, 0xff80, 0x0001}
	b := BF16Bytes(vals)
	for i, w := range want {
		if got := binary.LittleEndian.Uint16(b[2*i:]); got != w {
			t.Errorf("bf16(%g) = %#04x, want %#04x", vals[i], got, w)
		}
	}
	if nan := binary.LittleEndian.Uint16(BF16Bytes([]float32{float32(math.NaN())})); nan&0x7f80 != 0x7f80 || nan&0x7f == 0 {
		t.Errorf("bf16(NaN) = %#04x, not a NaN", nan)
	}
	ts := []NamedTensor{
		{Name: "bf", DType: tensor.BF16, Shape: []int{2, 4}, Data: b},
		{Name: "h", DType: tensor.F16, Shape: []int{2}, Data: F16Bytes([]float32{1, -2})},
	}
	got, _, err := ParseSafetensors(encodeST(t, ts, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Name != "bf" || got[0].DType != tensor.BF16 || !bytes.Equal(got[0].Data, b) {
		t.Fatalf("read back %+v", got[0])
	}
	f, err := got[0].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range f {
		if back := BF16Bytes([]float32{x}); binary.LittleEndian.Uint16(back) != want[i] {
			t.Errorf("element %d widened to %g, which does not encode back to %#04x", i, x, want[i])
		}
	}
	if f[0] != 1 || f[2] != 3.140625 || f[5] != 65536 {
		t.Errorf("widened %v", f)
	}
	if h, err := got[1].Float32s(); err != nil || h[0] != 1 || h[1] != -2 {
		t.Errorf("f16 widened %v, %v", h, err)
	}
	if _, err := (NamedTensor{Name: "ids", DType: tensor.I32, Shape: []int{1}, Data: I32Bytes([]int32{1})}).Float32s(); err == nil {
		t.Error("an i32 tensor widened to f32")
	}
}

// FloatBytes and BytesFloat are the dtype-chosen forms of F32Bytes, F16Bytes, BF16Bytes and
// their decoders: values a dtype holds exactly come back bit for bit, others come back rounded
// as the dtype rounds.
func TestFloatBytes_roundTrip(t *testing.T) {
	v := []float32{0, -1.5, 3.25, 1024, 0.1}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		b := FloatBytes(dt, v)
		if len(b) != len(v)*dt.Size() {
			t.Fatalf("%v: %d bytes", dt, len(b))
		}
		back := BytesFloat(dt, b)
		for i, x := range v[:4] { // exact in every dtype
			if back[i] != x {
				t.Errorf("%v [%d]: %g back as %g", dt, i, x, back[i])
			}
		}
		want := map[tensor.DType]float32{tensor.F32: 0.1, tensor.F16: 0.099975586, tensor.BF16: 0.100097656}[dt]
		if back[4] != want {
			t.Errorf("%v: 0.1 back as %.9g, want %.9g", dt, back[4], want)
		}
	}
	for _, bad := range []func(){func() { FloatBytes(tensor.I32, v) }, func() { BytesFloat(tensor.F16, []byte{1, 2, 3}) }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			bad()
		}()
	}
}
