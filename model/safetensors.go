package model

// safetensors.go: the safetensors file format (huggingface/safetensors), so
// that checkpoints written here open in PyTorch, JAX or any other tool.
//
//	[8 bytes]  N, the header length, little-endian uint64
//	[N bytes]  JSON header: {"name": {"dtype": "F32", "shape": [2, 3],
//	           "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//	           padded with spaces so the data starts 8-byte aligned
//	[rest]     the tensors' bytes, little-endian, row-major, back to back;
//	           data_offsets are relative to the start of this section
//
// Tensors are written sorted by name, so the same tensors always give the
// same bytes. Reading checks everything a corrupt or hostile file could get
// wrong before any tensor is returned.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// NamedTensor is one tensor of a safetensors file: host bytes in the file's
// little-endian layout, with its name, dtype and shape.
type NamedTensor struct {
	Name  string
	DType tensor.DType
	Shape []int
	Data  []byte // len = prod(Shape) × DType.Size()
}

// maxSafetensorsHeader bounds the JSON header, as the reference reader does
// (100 MB), so a corrupt length cannot make us allocate gigabytes.
const maxSafetensorsHeader = 100 << 20

func stDType(d tensor.DType) (string, error) {
	switch d {
	case tensor.F32:
		return "F32", nil
	case tensor.F16:
		return "F16", nil
	case tensor.I32:
		return "I32", nil
	case tensor.BF16:
		return "BF16", nil
	}
	return "", fmt.Errorf("model: safetensors: no name for dtype %v", d)
}

func parseSTDType(s string) (tensor.DType, bool) {
	switch s {
	case "F32":
		return tensor.F32, true
	case "F16":
		return tensor.F16, true
	case "I32":
		return tensor.I32, true
	case "BF16":
		return tensor.BF16, true
	}
	return 0, false
}

type stEntry struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

func stNumel(shape []int) (int, bool) {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// WriteSafetensors writes ts (in name order) and meta to w. Names must be
// unique and non-empty, and each Data must have exactly prod(Shape) elements.
func WriteSafetensors(w io.Writer, ts []NamedTensor, meta map[string]string) error {
	sorted := append([]NamedTensor(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	// The header is built by hand to keep the order: JSON objects from a Go
	// map would be sorted anyway, but "__metadata__" first is the convention.
	var h bytes.Buffer
	h.WriteByte('{')
	if len(meta) > 0 {
		mb, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("model: safetensors metadata: %w", err)
		}
		h.WriteString(`"__metadata__":`)
		h.Write(mb)
	}
	off := 0
	for i, t := range sorted {
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("model: safetensors: bad tensor name %q", t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("model: safetensors: tensor %q appears twice", t.Name)
		}
		dt, err := stDType(t.DType)
		if err != nil {
			return fmt.Errorf("model: safetensors: tensor %q: %w", t.Name, err)
		}
		n, ok := stNumel(t.Shape)
		if !ok || n*t.DType.Size() != len(t.Data) {
			return fmt.Errorf("model: safetensors: tensor %q: shape %v of %v needs %d bytes, have %d", t.Name, t.Shape, t.DType, n*t.DType.Size(), len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{} // a scalar: "shape": []
		}
		e, _ := json.Marshal(stEntry{DType: dt, Shape: shape, DataOffsets: [2]int{off, off + len(t.Data)}})
		name, _ := json.Marshal(t.Name)
		if h.Len() > 1 {
			h.WriteByte(',')
		}
		h.Write(name)
		h.WriteByte(':')
		h.Write(e)
		off += len(t.Data)
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return fmt.Errorf("model: safetensors: %w", err)
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return fmt.Errorf("model: safetensors: %w", err)
	}
	for _, t := range sorted {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("model: safetensors: tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// ReadSafetensors reads a whole safetensors file from r; see
// ParseSafetensors for what it checks.
func ReadSafetensors(r io.Reader) ([]NamedTensor, map[string]string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("model: safetensors: %w", err)
	}
	return ParseSafetensors(b)
}

// ParseSafetensors decodes a safetensors file held in b. It checks the
// header length against the file, the JSON, every dtype, that each tensor's
// byte range matches prod(shape) × dtype size, and that the ranges tile the
// data section exactly (sorted by offset: contiguous from 0, no overlap, no
// gap, nothing after). Tensors come back sorted by name; their Data alias b.
func ParseSafetensors(b []byte) ([]NamedTensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("model: safetensors: file of %d bytes has no header length", len(b))
	}
	hn := binary.LittleEndian.Uint64(b[:8])
	if hn > maxSafetensorsHeader || hn > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("model: safetensors: header length %d does not fit the file of %d bytes (limit %d)", hn, len(b), maxSafetensorsHeader)
	}
	header, data := b[8:8+hn], b[8+hn:]

	// Decode as raw messages first, to catch duplicate names (a Go map keeps
	// the last silently).
	dec := json.NewDecoder(bytes.NewReader(header))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("model: safetensors: header is not a JSON object: %v", err)
	}
	var meta map[string]string
	var ts []NamedTensor
	seen := map[string]bool{}
	offsets := map[string][2]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("model: safetensors: header JSON: %w", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q appears twice in the header", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("model: safetensors: __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var e stEntry
		if err := dec.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: bad header entry: %w", name, err)
		}
		dt, ok := parseSTDType(e.DType)
		if !ok {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: unsupported dtype %q (F32, F16, BF16, I32)", name, e.DType)
		}
		n, ok := stNumel(e.Shape)
		if !ok {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: bad shape %v", name, e.Shape)
		}
		beg, end := e.DataOffsets[0], e.DataOffsets[1]
		if beg < 0 || end < beg || end > len(data) {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: data_offsets [%d, %d] outside the %d data bytes", name, beg, end, len(data))
		}
		if want := n * dt.Size(); end-beg != want {
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: shape %v of %s needs %d bytes, data_offsets give %d", name, e.Shape, e.DType, want, end-beg)
		}
		ts = append(ts, NamedTensor{Name: name, DType: dt, Shape: e.Shape, Data: data[beg:end:end]})
		offsets[name] = e.DataOffsets
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("model: safetensors: header JSON: %w", err)
	}
	if rest := bytes.TrimSpace(header[dec.InputOffset():]); len(rest) > 0 {
		return nil, nil, fmt.Errorf("model: safetensors: %d bytes of junk after the header JSON", len(rest))
	}
	// The ranges, by offset, must tile [0, len(data)).
	byOff := append([]NamedTensor(nil), ts...)
	sort.Slice(byOff, func(i, j int) bool {
		oi, oj := offsets[byOff[i].Name], offsets[byOff[j].Name]
		if oi[0] != oj[0] {
			return oi[0] < oj[0]
		}
		return oi[1] < oj[1]
	})
	pos := 0
	for _, t := range byOff {
		o := offsets[t.Name]
		if o[0] != pos {
			what := "overlaps the previous tensor"
			if o[0] > pos {
				what = "leaves a gap after the previous tensor"
			}
			return nil, nil, fmt.Errorf("model: safetensors: tensor %q: data_offsets [%d, %d] %s (which ends at %d)", t.Name, o[0], o[1], what, pos)
		}
		pos = o[1]
	}
	if pos != len(data) {
		return nil, nil, fmt.Errorf("model: safetensors: %d bytes of data after the last tensor (file truncated or padded?)", len(data)-pos)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts, meta, nil
}

// F32Bytes encodes float32s as little-endian bytes (a new slice).
func F32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// BytesF32 decodes little-endian bytes into float32s (a new slice); a length
// that is not a multiple of 4 panics.
func BytesF32(b []byte) []float32 {
	if len(b)%4 != 0 {
		panic(fmt.Sprintf("model: BytesF32 of %d bytes", len(b)))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// F16Bytes encodes float32s as IEEE half (rounded to nearest even), little-endian (a new slice).
func F16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], half.FromFloat32(x))
	}
	return b
}

// BF16Bytes encodes float32s as bfloat16, little-endian (a new slice): the top 16 bits of each
// binary32, rounded to nearest even, as PyTorch rounds; a NaN stays a (quiet) NaN.
func BF16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], half.BF16FromFloat32(x))
	}
	return b
}

// FloatBytes encodes float32s as dt's little-endian elements: F32Bytes, F16Bytes or BF16Bytes.
// Another dtype panics.
func FloatBytes(dt tensor.DType, v []float32) []byte {
	switch dt {
	case tensor.F32:
		return F32Bytes(v)
	case tensor.F16:
		return F16Bytes(v)
	case tensor.BF16:
		return BF16Bytes(v)
	}
	panic(fmt.Sprintf("model: FloatBytes of %v", dt))
}

// BytesFloat decodes dt's little-endian elements into float32s (a new slice, exact): the
// inverse of FloatBytes. Another dtype, or a length that is not a whole number of elements,
// panics.
func BytesFloat(dt tensor.DType, b []byte) []float32 {
	if (dt != tensor.F32 && !dt.Half()) || len(b)%dt.Size() != 0 {
		panic(fmt.Sprintf("model: BytesFloat of %d bytes of %v", len(b), dt))
	}
	v, err := NamedTensor{Name: "bytes", DType: dt, Shape: []int{len(b) / dt.Size()}, Data: b}.Float32s()
	if err != nil {
		panic(err)
	}
	return v
}

// Float32s widens the tensor to float32 (a new slice): F32 as it is, F16 and BF16 exactly (every
// half and bfloat16 is a float32). Other dtypes are an error naming the tensor.
func (t NamedTensor) Float32s() ([]float32, error) {
	n, ok := stNumel(t.Shape)
	if !ok || n*t.DType.Size() != len(t.Data) {
		return nil, fmt.Errorf("model: tensor %q: shape %v of %v needs %d bytes, have %d", t.Name, t.Shape, t.DType, n*t.DType.Size(), len(t.Data))
	}
	switch t.DType {
	case tensor.F32:
		return BytesF32(t.Data), nil
	case tensor.F16:
		v, tab := make([]float32, n), half.Table()
		for i := range v {
			v[i] = tab[binary.LittleEndian.Uint16(t.Data[2*i:])]
		}
		return v, nil
	case tensor.BF16:
		v := make([]float32, n)
		for i := range v {
			v[i] = half.BF16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("model: tensor %q is %v, not a floating-point dtype (F32, F16, BF16)", t.Name, t.DType)
}

// I32Bytes and BytesI32 are the same for int32s.
func I32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func BytesI32(b []byte) []int32 {
	if len(b)%4 != 0 {
		panic(fmt.Sprintf("model: BytesI32 of %d bytes", len(b)))
	}
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
