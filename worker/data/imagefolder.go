package data

// imagefolder.go: data.kind image_folder, the layout people keep their images in, as torchvision's
// ImageFolder reads it (torchvision/datasets/folder.py):
//
//	ROOT/train/CLASS/*.jpg|jpeg|png
//	ROOT/val/CLASS/*.jpg|jpeg|png
//
// The classes are the sub-directory names sorted (label i is the i-th name), the same list in
// train/ and val/; a class's files are taken in sorted order, files of other extensions are
// ignored. Images are decoded in Fill, on the loader's workers (Go's image/jpeg and image/png),
// transformed and normalised straight into the batch's buffers (pinned under the CUDA build).

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers the JPEG decoder
	_ "image/png"  // registers the PNG decoder
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goddp/goddp/model/tensor"
)

// ImageNet's per-channel normalisation (RGB, on [0,1]): the default of data.kind image_folder.
var (
	ImageNetMean = [3]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float32{0.229, 0.224, 0.225}
)

// ImageExtensions are the files an image folder reads (case-insensitive); others are ignored.
var ImageExtensions = []string{".jpg", ".jpeg", ".png"}

// ImageFolderConfig is how an image folder's samples are made.
type ImageFolderConfig struct {
	Size      int        // the square side of every sample (torchvision's 224)
	Mean, Std [3]float32 // per-channel normalisation of [0,1] RGB values: (x − Mean)/Std
	// Train: RandomResizedCrop(Size) (scale 0.08–1, ratio 3/4–4/3, 10 tries, then a centre crop)
	// and a horizontal flip with p = 0.5, drawn from (Seed, epoch, sample index). Otherwise the
	// eval transform: resize the shorter side to Size/0.875, centre crop Size.
	Train bool
	Seed  uint64
}

// ImageFolder is one split of an image folder: the file list and labels, read lazily. Samples
// are (3, Size, Size) float32 planes, RGB; a grayscale image becomes three equal channels (every
// image model here takes 3 channels, as torchvision's ImageFolder converts to RGB).
type ImageFolder struct {
	Dir     string   // the split's directory, ROOT/train or ROOT/val
	Classes []string // sorted class names; label i is Classes[i]
	Files   []string // (N) paths
	Labels  []int32  // (N)
	cfg     ImageFolderConfig
}

// LoadImageFolder lists root/train and root/val (each with the same classes) into the training
// set (cfg with Train set) and the evaluation set (the eval transform). Errors name the
// directory: a missing split, a split with no class directories, a class with no image, train
// and val with different classes.
func LoadImageFolder(root string, cfg ImageFolderConfig) (train, val *ImageFolder, err error) {
	if cfg.Size < 1 {
		return nil, nil, fmt.Errorf("data: image folder %s: image size %d: want >= 1", root, cfg.Size)
	}
	for ch := range cfg.Std {
		if !(cfg.Std[ch] > 0) {
			return nil, nil, fmt.Errorf("data: image folder %s: std %v: want every channel > 0", root, cfg.Std)
		}
	}
	tc, ec := cfg, cfg
	tc.Train, ec.Train = true, false
	if train, err = ScanImageFolder(filepath.Join(root, "train"), tc); err != nil {
		return nil, nil, err
	}
	if val, err = ScanImageFolder(filepath.Join(root, "val"), ec); err != nil {
		return nil, nil, err
	}
	if strings.Join(train.Classes, "\x00") != strings.Join(val.Classes, "\x00") {
		return nil, nil, fmt.Errorf("data: image folder: the classes of %s (%d: %s) and %s (%d: %s) differ; both splits need the same class directories",
			train.Dir, len(train.Classes), short(train.Classes), val.Dir, len(val.Classes), short(val.Classes))
	}
	return train, val, nil
}

func short(names []string) string {
	if len(names) > 8 {
		return strings.Join(names[:8], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}

// ScanImageFolder lists one split: dir/CLASS/*.{jpg,jpeg,png}. Symbolic links are followed;
// directories whose names start with "." (.ipynb_checkpoints, .git) are not classes, where
// torchvision would count them.
func ScanImageFolder(dir string, cfg ImageFolderConfig) (*ImageFolder, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: image folder: %w", err)
	}
	f := &ImageFolder{Dir: dir, cfg: cfg}
	for _, e := range ents {
		if isDir(dir, e) && !strings.HasPrefix(e.Name(), ".") {
			f.Classes = append(f.Classes, e.Name())
		}
	}
	sort.Strings(f.Classes)
	if len(f.Classes) == 0 {
		return nil, fmt.Errorf("data: image folder %s: no class directories (want %s/CLASS/*.jpg|png)", dir, dir)
	}
	for label, c := range f.Classes {
		cdir := filepath.Join(dir, c)
		files, err := os.ReadDir(cdir)
		if err != nil {
			return nil, fmt.Errorf("data: image folder: %w", err)
		}
		n := 0
		for _, fe := range files {
			if !isImage(fe.Name()) || isDir(cdir, fe) {
				continue
			}
			f.Files = append(f.Files, filepath.Join(cdir, fe.Name())) // ReadDir sorts by name
			f.Labels = append(f.Labels, int32(label))
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("data: image folder: class directory %s holds no image (%s)", cdir, strings.Join(ImageExtensions, ", "))
		}
	}
	return f, nil
}

// isDir reports whether e in dir is a directory, following a symbolic link (as Python's
// os.scandir does for torchvision: data sets are often trees of links).
func isDir(dir string, e os.DirEntry) bool {
	if e.Type()&os.ModeSymlink == 0 {
		return e.IsDir()
	}
	fi, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && fi.IsDir()
}

func isImage(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	for _, e := range ImageExtensions {
		if ext == e {
			return true
		}
	}
	return false
}

func (f *ImageFolder) Len() int { return len(f.Files) }
func (f *ImageFolder) Layout() Layout {
	return Layout{Features: 3 * f.cfg.Size * f.cfg.Size, Labels: true}
}

// Fill decodes, transforms and normalises the samples idx into b.X (3,Size,Size each) and b.Y.
// An unreadable or undecodable file sets b.Err, an error naming it (Loader.Next returns it).
func (f *ImageFolder) Fill(b *Batch, idx []int) {
	S := f.cfg.Size
	F := 3 * S * S
	var pix []float32
	for i, j := range idx {
		var err error
		pix, err = f.sample(b.X[i*F:(i+1)*F], pix, b.Epoch, j)
		if err != nil {
			b.Err = err
			b.Size = 0
			return
		}
		b.Y[i] = f.Labels[j]
	}
	b.Size = len(idx)
	b.Features = F
}

// Sample decodes and transforms sample j of epoch into dst (3·Size·Size); a test and benchmark
// entry point.
func (f *ImageFolder) Sample(dst []float32, epoch, j int) error {
	_, err := f.sample(dst, nil, epoch, j)
	return err
}

func (f *ImageFolder) sample(dst, pix []float32, epoch, j int) ([]float32, error) {
	path := f.Files[j]
	fh, err := os.Open(path)
	if err != nil {
		return pix, fmt.Errorf("data: image %s: %w", path, err)
	}
	img, _, err := image.Decode(fh)
	fh.Close()
	if err != nil {
		return pix, fmt.Errorf("data: image %s: cannot decode: %w", path, err)
	}
	r := img.Bounds()
	W, H := r.Dx(), r.Dy()
	if W < 1 || H < 1 {
		return pix, fmt.Errorf("data: image %s: empty (%dx%d)", path, W, H)
	}
	pix = toPlanes(pix, img)
	var x0, y0, cw, ch float64
	flip := false
	S := f.cfg.Size
	if f.cfg.Train {
		rng := sampleRNG{s: tensor.Mix64(f.cfg.Seed ^ tensor.Mix64(uint64(epoch)<<40^uint64(j)))}
		top, left, h, w := randomResizedCrop(&rng, H, W)
		x0, y0, cw, ch = float64(left), float64(top), float64(w), float64(h)
		flip = rng.float() < 0.5
	} else {
		// Resize the shorter side to Size/0.875, centre crop Size: in source pixels, a square of
		// side Size/scale centred.
		R := math.Floor(float64(S)/0.875 + 0.5)
		scale := R / float64(min(W, H))
		side := float64(S) / scale
		cw, ch = side, side
		x0, y0 = (float64(W)-side)/2, (float64(H)-side)/2
	}
	resample(dst, pix, W, H, x0, y0, cw, ch, S, flip)
	for c := 0; c < 3; c++ {
		m, inv := f.cfg.Mean[c], 1/f.cfg.Std[c]
		p := dst[c*S*S : (c+1)*S*S]
		for k, v := range p {
			p[k] = (v - m) * inv
		}
	}
	return pix, nil
}

// toPlanes converts img to three (H,W) planes of [0,1] values, RGB, reusing buf; grey images
// give three equal planes. Colours with alpha are taken without it (PNG's non-premultiplied).
func toPlanes(buf []float32, img image.Image) []float32 {
	r := img.Bounds()
	W, H := r.Dx(), r.Dy()
	n := W * H
	if cap(buf) < 3*n {
		buf = make([]float32, 3*n)
	}
	buf = buf[:3*n]
	R, G, B := buf[:n], buf[n:2*n], buf[2*n:]
	const k = 1.0 / 255
	switch m := img.(type) {
	case *image.Gray:
		for y := 0; y < H; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+W]
			for x, v := range row {
				f := float32(v) * k
				R[y*W+x], G[y*W+x], B[y*W+x] = f, f, f
			}
		}
	case *image.NRGBA:
		for y := 0; y < H; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+4*W]
			for x := 0; x < W; x++ {
				R[y*W+x], G[y*W+x], B[y*W+x] = float32(row[4*x])*k, float32(row[4*x+1])*k, float32(row[4*x+2])*k
			}
		}
	case *image.RGBA:
		for y := 0; y < H; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+4*W]
			for x := 0; x < W; x++ {
				R[y*W+x], G[y*W+x], B[y*W+x] = float32(row[4*x])*k, float32(row[4*x+1])*k, float32(row[4*x+2])*k
			}
		}
	case *image.YCbCr: // JPEG: color.YCbCrToRGB's fixed-point arithmetic, inlined
		clamp := func(v int32) float32 {
			if uint32(v)&0xff000000 == 0 {
				return float32(v>>16) * k
			}
			return float32(uint8(^(v >> 31))) * k
		}
		for y := 0; y < H; y++ {
			yrow := m.Y[m.YOffset(r.Min.X, y+r.Min.Y):]
			for x := 0; x < W; x++ {
				ci := m.COffset(x+r.Min.X, y+r.Min.Y)
				yy1 := int32(yrow[x]) * 0x10101
				cb1, cr1 := int32(m.Cb[ci])-128, int32(m.Cr[ci])-128
				o := y*W + x
				R[o] = clamp(yy1 + 91881*cr1)
				G[o] = clamp(yy1 - 22554*cb1 - 46802*cr1)
				B[o] = clamp(yy1 + 116130*cb1)
			}
		}
	default:
		for y := 0; y < H; y++ {
			for x := 0; x < W; x++ {
				c := color.NRGBAModel.Convert(img.At(x+r.Min.X, y+r.Min.Y)).(color.NRGBA)
				R[y*W+x], G[y*W+x], B[y*W+x] = float32(c.R)*k, float32(c.G)*k, float32(c.B)*k
			}
		}
	}
	return buf
}

// resample writes the source rectangle (x0, y0, w, h) of the three (H,W) planes src, scaled to
// S×S (bilinear, pixel centres at +0.5, edges clamped; mirrored when flip), into dst (3,S,S).
// torchvision's resize antialiases when shrinking; this does not (a small difference in
// downscaled images, none in the crop geometry).
func resample(dst, src []float32, W, H int, x0, y0, w, h float64, S int, flip bool) {
	sx, sy := w/float64(S), h/float64(S)
	type tap struct {
		i0, i1 int
		f      float32
	}
	taps := func(n int, off, s float64, lim int) []tap {
		t := make([]tap, n)
		for o := range t {
			p := off + (float64(o)+0.5)*s - 0.5
			p = math.Max(0, math.Min(p, float64(lim-1)))
			i := int(p)
			j := min(i+1, lim-1)
			t[o] = tap{i, j, float32(p - float64(i))}
		}
		return t
	}
	xt, yt := taps(S, x0, sx, W), taps(S, y0, sy, H)
	if flip {
		for a, b := 0, S-1; a < b; a, b = a+1, b-1 {
			xt[a], xt[b] = xt[b], xt[a]
		}
	}
	for c := 0; c < 3; c++ {
		p := src[c*W*H : (c+1)*W*H]
		out := dst[c*S*S : (c+1)*S*S]
		for oy, ty := range yt {
			r0, r1 := p[ty.i0*W:ty.i0*W+W], p[ty.i1*W:ty.i1*W+W]
			row := out[oy*S : oy*S+S]
			for ox, tx := range xt {
				a := r0[tx.i0] + (r0[tx.i1]-r0[tx.i0])*tx.f
				b := r1[tx.i0] + (r1[tx.i1]-r1[tx.i0])*tx.f
				row[ox] = a + (b-a)*ty.f
			}
		}
	}
}

// randomResizedCrop is torchvision's RandomResizedCrop.get_params with its defaults (scale
// 0.08–1, ratio 3/4–4/3): ten tries at a crop of a random area and log-uniform aspect ratio that
// fits, then the centre crop of the whole image clamped to the ratio range.
func randomResizedCrop(rng *sampleRNG, H, W int) (top, left, h, w int) {
	area := float64(H * W)
	lo, hi := math.Log(3.0/4), math.Log(4.0/3)
	for try := 0; try < 10; try++ {
		target := area * (0.08 + (1-0.08)*rng.float())
		ar := math.Exp(lo + (hi-lo)*rng.float())
		w = int(math.Round(math.Sqrt(target * ar)))
		h = int(math.Round(math.Sqrt(target / ar)))
		if w > 0 && w <= W && h > 0 && h <= H {
			top = int(rng.next() % uint64(H-h+1))
			left = int(rng.next() % uint64(W-w+1))
			return
		}
	}
	in := float64(W) / float64(H)
	switch {
	case in < 3.0/4:
		w = W
		h = int(math.Round(float64(w) / (3.0 / 4)))
	case in > 4.0/3:
		h = H
		w = int(math.Round(float64(h) * (4.0 / 3)))
	default:
		w, h = W, H
	}
	return (H - h) / 2, (W - w) / 2, h, w
}

// sampleRNG is a SplitMix64 stream: one per (seed, epoch, sample), so a sample's augmentation is
// the same whichever worker or rank draws it, and a resumed run repeats an uninterrupted one.
type sampleRNG struct{ s uint64 }

func (r *sampleRNG) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return tensor.Mix64(r.s)
}

func (r *sampleRNG) float() float64 { return float64(r.next()>>11) / (1 << 53) }

var _ Dataset = (*ImageFolder)(nil)
