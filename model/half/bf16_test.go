package half

import (
	"bufio"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

func isNaNBF16(b uint16) bool { return b&0x7f80 == 0x7f80 && b&0x7f != 0 }

// Known bit patterns: ties to even, overflow to Inf, subnormals kept, NaNs quiet.
func TestBF16FromFloat32_bits(t *testing.T) {
	for _, c := range []struct {
		f32  uint32
		bf16 uint16
	}{
		{0x00000000, 0x0000}, {0x80000000, 0x8000}, // ±0
		{0x3f800000, 0x3f80},                       // 1
		{0x3f808000, 0x3f80},                       // 1 + 2^-8: a tie, the kept bit even: down
		{0x3f818000, 0x3f82},                       // a tie, the kept bit odd: up
		{0x3f808001, 0x3f81},                       // past the tie: up
		{0x3f807fff, 0x3f80},                       // below the tie: down
		{0x3fffffff, 0x4000},                       // a carry into the exponent
		{0x00000001, 0x0000},                       // the smallest subnormal rounds to 0
		{0x00008000, 0x0000},                       // a subnormal tie, even: down
		{0x00018000, 0x0002},                       // a subnormal tie, odd: up
		{0x007fffff, 0x0080},                       // the largest subnormal rounds up to the smallest normal
		{0x00400000, 0x0040},                       // a subnormal kept exactly
		{0x7f7f0000, 0x7f7f},                       // MaxBF16
		{0x7f7f7fff, 0x7f7f},                       // below the tie to Inf
		{0x7f7f8000, 0x7f80},                       // the tie rounds to even: Inf
		{0x7f7fffff, 0x7f80},                       // max f32 overflows to Inf
		{0xff7fffff, 0xff80},                       // and -max to -Inf
		{0x7f800000, 0x7f80}, {0xff800000, 0xff80}, // ±Inf
		{0x7fc00000, 0x7fc0}, {0xffc00000, 0xffc0}, // quiet NaNs keep their sign
		{0x7f800001, 0x7fc0}, // a signalling NaN with a low payload: quiet, not Inf
		{0x7fa00000, 0x7fe0}, // the top payload bits kept
		{0x40490fdb, 0x4049}, // pi
	} {
		f := math.Float32frombits(c.f32)
		if got := BF16FromFloat32(f); got != c.bf16 {
			t.Errorf("BF16FromFloat32(%#08x) = %#04x, want %#04x", c.f32, got, c.bf16)
		}
		var d [1]uint16
		EncodeBF16(d[:], []float32{f})
		if d[0] != c.bf16 {
			t.Errorf("EncodeBF16(%#08x) = %#04x, want %#04x", c.f32, d[0], c.bf16)
		}
		x := []float32{f}
		RoundBF16(x)
		if got, want := math.Float32bits(x[0]), uint32(c.bf16)<<16; got != want {
			t.Errorf("RoundBF16(%#08x) = %#08x, want %#08x", c.f32, got, want)
		}
	}
	if MaxBF16 != BF16ToFloat32(0x7f7f) {
		t.Errorf("MaxBF16 = %g, bits 0x7f7f are %g", MaxBF16, BF16ToFloat32(0x7f7f))
	}
}

// testdata/bf16_torch.txt is PyTorch's float32 → bfloat16 (scripts/gen_bf16_table.py). NaNs must
// stay NaNs (torch's own bits for them differ between its scalar and vector paths).
func TestBF16FromFloat32_torch(t *testing.T) {
	f, err := os.Open("testdata/bf16_torch.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, rows := bufio.NewScanner(f), 0
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		var in uint64
		var want uint64
		fs := strings.Fields(line)
		if len(fs) != 2 {
			t.Fatalf("bad row %q", line)
		}
		if in, err = strconv.ParseUint(fs[0], 16, 32); err == nil {
			want, err = strconv.ParseUint(fs[1], 16, 16)
		}
		if err != nil {
			t.Fatalf("bad row %q: %v", line, err)
		}
		rows++
		x := math.Float32frombits(uint32(in))
		got := BF16FromFloat32(x)
		if isNaNBF16(uint16(want)) {
			if !isNaNBF16(got) {
				t.Errorf("BF16FromFloat32(%#08x) = %#04x, torch gives a NaN (%#04x)", in, got, want)
			}
			continue
		}
		if got != uint16(want) {
			t.Errorf("BF16FromFloat32(%#08x) = %#04x, torch %#04x", in, got, want)
		}
	}
	if rows < 10000 {
		t.Fatalf("only %d rows in testdata/bf16_torch.txt", rows)
	}
}

// Widening is exact and narrowing a widened value gives the bits back (NaNs quiet); the slice
// functions, Format and the table agree with the scalar ones on random bits of every kind.
func TestBF16_roundTripAndSlices(t *testing.T) {
	tab := BF16Table()
	for i := range 1 << 16 {
		b := uint16(i)
		w := BF16ToFloat32(b)
		if math.Float32bits(w) != uint32(b)<<16 || math.Float32bits(tab[b]) != uint32(b)<<16 || math.Float32bits(BF16.ToFloat32(b)) != uint32(b)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x", b, math.Float32bits(w))
		}
		back := BF16FromFloat32(w)
		if isNaNBF16(b) {
			if back != b|0x40 {
				t.Fatalf("NaN %#04x narrowed back to %#04x", b, back)
			}
		} else if back != b {
			t.Fatalf("%#04x narrowed back to %#04x", b, back)
		}
	}
	r := rand.New(rand.NewPCG(3, 2))
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = math.Float32frombits(r.Uint32())
	}
	enc := make([]uint16, len(src))
	BF16.Encode(enc, src)
	dec := make([]float32, len(src))
	BF16.Decode(dec, enc)
	rounded := append([]float32(nil), src...)
	BF16.Round(rounded)
	for i, x := range src {
		want := BF16FromFloat32(x)
		if enc[i] != want || BF16.FromFloat32(x) != want {
			t.Fatalf("Encode(%#08x) = %#04x, scalar %#04x", math.Float32bits(x), enc[i], want)
		}
		if math.Float32bits(dec[i]) != uint32(want)<<16 || math.Float32bits(rounded[i]) != uint32(want)<<16 {
			t.Fatalf("Decode/Round(%#08x) = %#08x / %#08x, want %#08x", math.Float32bits(x), math.Float32bits(dec[i]), math.Float32bits(rounded[i]), uint32(want)<<16)
		}
	}
	// Format F16 is the package's f16 functions.
	F16.Encode(enc, src)
	for i, x := range src {
		if enc[i] != FromFloat32(x) || F16.FromFloat32(x) != enc[i] {
			t.Fatalf("F16.Encode(%g) = %#04x, FromFloat32 %#04x", x, enc[i], FromFloat32(x))
		}
	}
	if F16.Table() != Table() || BF16.Table() != BF16Table() || F16.ToFloat32(0x3c00) != 1 {
		t.Error("Format.Table or ToFloat32")
	}
	if F16.Max() != Max || BF16.Max() != MaxBF16 || F16.String() != "f16" || BF16.String() != "bf16" {
		t.Error("Format.Max or String")
	}
}

func BenchmarkEncodeBF16(b *testing.B) {
	src, dst := make([]float32, 1<<16), make([]uint16, 1<<16)
	for i := range src {
		src[i] = float32(i) * 1.37e-3
	}
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		EncodeBF16(dst, src)
	}
}

func BenchmarkDecodeBF16(b *testing.B) {
	src, dst := make([]uint16, 1<<16), make([]float32, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	b.SetBytes(int64(2 * len(src)))
	for b.Loop() {
		DecodeBF16(dst, src)
	}
}
