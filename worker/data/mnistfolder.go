package data

import (
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
)

// WriteMNISTFolder writes MNIST from mnistDir (LoadMNIST's idx files) as an image folder under
// root: root/train/0..9/NNNNN.png (the 60000 training images) and root/val/0..9/NNNNN.png (the
// 10000 t10k ones), 28×28 grey PNGs, the first limit of each split when limit > 0 (a class with no image among them gets no
// directory; about 100 per split bring all ten). It returns the
// images written per split. `ddpbench images --from-mnist` runs it, so that data.kind
// image_folder can be tried end to end.
func WriteMNISTFolder(mnistDir, root string, limit int) (train, val int, err error) {
	tr, te, err := LoadMNIST(mnistDir)
	if err != nil {
		return 0, 0, err
	}
	if train, err = writeClassFolder(tr, filepath.Join(root, "train"), limit); err != nil {
		return 0, 0, err
	}
	if val, err = writeClassFolder(te, filepath.Join(root, "val"), limit); err != nil {
		return 0, 0, err
	}
	return train, val, nil
}

func writeClassFolder(c *Classification, dir string, limit int) (int, error) {
	n := c.N
	if limit > 0 {
		n = min(n, limit)
	}
	made := map[int32]bool{} // a class directory is made with its first image: none is empty
	img := image.NewGray(image.Rect(0, 0, c.Cols, c.Rows))
	for i := 0; i < n; i++ {
		for p, x := range c.X[i*c.Features : (i+1)*c.Features] {
			// LoadMNIST's (x/255 − mean)/std undone: the byte it read.
			img.Pix[p] = uint8(math.Round(float64((x*MNISTStd + MNISTMean) * 255)))
		}
		if !made[c.Y[i]] {
			if err := os.MkdirAll(filepath.Join(dir, fmt.Sprint(c.Y[i])), 0o755); err != nil {
				return i, fmt.Errorf("data: %w", err)
			}
			made[c.Y[i]] = true
		}
		path := filepath.Join(dir, fmt.Sprint(c.Y[i]), fmt.Sprintf("%05d.png", i))
		f, err := os.Create(path)
		if err != nil {
			return i, fmt.Errorf("data: %w", err)
		}
		err = png.Encode(f, img)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return i, fmt.Errorf("data: writing %s: %w", path, err)
		}
	}
	return n, nil
}
