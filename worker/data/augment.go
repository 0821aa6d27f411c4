package data

import "github.com/goddp/goddp/model/tensor"

// RandomCrop wraps an image classification set whose samples are (C,H,W) float32 images: each
// filled sample is the image zero-padded by pad on every side and cropped back to H×W at a
// random offset in [0, 2·pad]² (the CIFAR/MNIST augmentation; no horizontal flip, which would be
// wrong for digits). The offset is a function of (seed, epoch, sample index), so a run repeats
// itself and a resumed run repeats an uninterrupted one, whatever the number of loader workers.
// The work happens in Fill, on the loader's workers.
func RandomCrop(ds Dataset, c, h, w, pad int, seed uint64) Dataset {
	return &randomCrop{ds: ds, c: c, h: h, w: w, pad: pad, seed: seed}
}

type randomCrop struct {
	ds      Dataset
	c, h, w int
	pad     int
	seed    uint64
}

func (r *randomCrop) Len() int       { return r.ds.Len() }
func (r *randomCrop) Layout() Layout { return r.ds.Layout() }

func (r *randomCrop) Fill(b *Batch, idx []int) {
	r.ds.Fill(b, idx)
	n := r.c * r.h * r.w
	tmp := make([]float32, n)
	span := uint64(2*r.pad + 1)
	for i, j := range idx {
		u := tensor.Mix64(r.seed ^ tensor.Mix64(uint64(b.Epoch)<<40^uint64(j)))
		dy, dx := int(u%span)-r.pad, int((u/span)%span)-r.pad
		if dy == 0 && dx == 0 {
			continue
		}
		img := b.X[i*n : (i+1)*n]
		copy(tmp, img)
		clear(img)
		for ch := 0; ch < r.c; ch++ {
			for y := 0; y < r.h; y++ {
				sy := y + dy
				if sy < 0 || sy >= r.h {
					continue
				}
				for x := 0; x < r.w; x++ {
					if sx := x + dx; sx >= 0 && sx < r.w {
						img[(ch*r.h+y)*r.w+x] = tmp[(ch*r.h+sy)*r.w+sx]
					}
				}
			}
		}
	}
}
