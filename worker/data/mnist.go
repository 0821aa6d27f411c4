package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// MNIST's normalisation: the training set's pixel mean and standard deviation
// (on [0,1]), as torchvision uses.
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// idx magic numbers: 0x0000 08 0N, type 0x08 = unsigned byte, N dimensions.
const (
	idxMagicLabels = 0x00000801
	idxMagicImages = 0x00000803
)

// Classification is an in-memory labelled data set of fixed-size float32
// feature vectors, such as MNIST images.
type Classification struct {
	N        int       // samples
	Features int       // floats per sample (rows × cols for images)
	Rows     int       // image height, or 0
	Cols     int       // image width, or 0
	Classes  int       // labels are in [0, Classes)
	X        []float32 // (N, Features) row-major
	Y        []int32   // (N)
}

func (c *Classification) Len() int       { return c.N }
func (c *Classification) Layout() Layout { return Layout{Features: c.Features, Labels: true} }

// Fill copies the rows idx into b.X and b.Y.
func (c *Classification) Fill(b *Batch, idx []int) {
	F := c.Features
	for i, j := range idx {
		copy(b.X[i*F:(i+1)*F], c.X[j*F:(j+1)*F])
		b.Y[i] = c.Y[j]
	}
	b.Size = len(idx)
	b.Features = F
}

var _ Dataset = (*Classification)(nil)

// LoadMNIST reads MNIST from dir: train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain or gzipped
// (a ".gz" suffix; the plain name is tried first). Pixels become
// (x/255 - MNISTMean)/MNISTStd. A missing, truncated or malformed file, or
// image and label files of different counts, is an error naming the file.
func LoadMNIST(dir string) (train, test *Classification, err error) {
	if train, err = loadIDXPair(dir, "train"); err != nil {
		return nil, nil, err
	}
	if test, err = loadIDXPair(dir, "t10k"); err != nil {
		return nil, nil, err
	}
	if test.Features != train.Features {
		return nil, nil, fmt.Errorf("data: MNIST in %s: train images are %dx%d but t10k images %dx%d", dir, train.Rows, train.Cols, test.Rows, test.Cols)
	}
	return train, test, nil
}

func loadIDXPair(dir, prefix string) (*Classification, error) {
	imgPath, err := findIDX(dir, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	lblPath, err := findIDX(dir, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	pix, n, rows, cols, err := readIDXImages(imgPath)
	if err != nil {
		return nil, err
	}
	labels, err := readIDXLabels(lblPath)
	if err != nil {
		return nil, err
	}
	if len(labels) != n {
		return nil, fmt.Errorf("data: %s holds %d labels but %s holds %d images", lblPath, len(labels), imgPath, n)
	}
	c := &Classification{N: n, Features: rows * cols, Rows: rows, Cols: cols, Classes: 10,
		X: make([]float32, len(pix)), Y: make([]int32, n)}
	var lut [256]float32
	for v := range lut {
		lut[v] = float32((float64(v)/255 - MNISTMean) / MNISTStd)
	}
	for i, p := range pix {
		c.X[i] = lut[p]
	}
	for i, l := range labels {
		if l > 9 {
			return nil, fmt.Errorf("data: %s: label %d of sample %d is outside 0..9", lblPath, l, i)
		}
		c.Y[i] = int32(l)
	}
	return c, nil
}

// findIDX returns dir/name or dir/name.gz, whichever exists.
func findIDX(dir, name string) (string, error) {
	for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, name+".gz")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("data: MNIST file %s(.gz) not found in %s", name, dir)
}

// openIDX opens path, unwrapping gzip when the file starts with gzip's magic.
func openIDX(path string) (io.Reader, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	br := bufio.NewReaderSize(f, 1<<20)
	head, _ := br.Peek(2)
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("data: %s: bad gzip stream: %v", path, err)
		}
		return zr, func() { f.Close() }, nil
	}
	return br, func() { f.Close() }, nil
}

// readHeader reads the magic and dims big-endian uint32s.
func readHeader(r io.Reader, path string, wantMagic uint32, ndim int) ([]int, error) {
	hdr := make([]uint32, 1+ndim)
	if err := binary.Read(r, binary.BigEndian, hdr); err != nil {
		return nil, fmt.Errorf("data: %s: truncated header (want %d bytes): %v", path, 4*(1+ndim), err)
	}
	if hdr[0] != wantMagic {
		return nil, fmt.Errorf("data: %s: bad magic 0x%08x, want 0x%08x (idx%d unsigned bytes)", path, hdr[0], wantMagic, ndim)
	}
	dims := make([]int, ndim)
	for i := range dims {
		dims[i] = int(hdr[1+i])
		if dims[i] > 1<<28 {
			return nil, fmt.Errorf("data: %s: implausible dimension %d = %d", path, i, dims[i])
		}
	}
	return dims, nil
}

// readBody reads exactly n bytes and checks nothing follows.
func readBody(r io.Reader, path string, n int, what string) ([]byte, error) {
	buf := make([]byte, n)
	got, err := io.ReadFull(r, buf)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("data: %s: truncated: header promises %d bytes of %s, file has %d", path, n, what, got)
		}
		return nil, fmt.Errorf("data: %s: reading %s: %v", path, what, err)
	}
	var one [1]byte
	switch k, err := io.ReadFull(r, one[:]); {
	case k > 0:
		return nil, fmt.Errorf("data: %s: trailing bytes after %d bytes of %s", path, n, what)
	case err != io.EOF:
		// A gzip stream cut short or failing its checksum ends here.
		return nil, fmt.Errorf("data: %s: corrupt or truncated after %d bytes of %s: %v", path, n, what, err)
	}
	return buf, nil
}

func readIDXImages(path string) (pix []byte, n, rows, cols int, err error) {
	r, done, err := openIDX(path)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer done()
	dims, err := readHeader(r, path, idxMagicImages, 3)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	n, rows, cols = dims[0], dims[1], dims[2]
	if rows == 0 || cols == 0 {
		return nil, 0, 0, 0, fmt.Errorf("data: %s: empty images %dx%d", path, rows, cols)
	}
	pix, err = readBody(r, path, n*rows*cols, "pixels")
	return pix, n, rows, cols, err
}

func readIDXLabels(path string) ([]byte, error) {
	r, done, err := openIDX(path)
	if err != nil {
		return nil, err
	}
	defer done()
	dims, err := readHeader(r, path, idxMagicLabels, 1)
	if err != nil {
		return nil, err
	}
	return readBody(r, path, dims[0], "labels")
}
