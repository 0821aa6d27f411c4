package data

import (
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFolder makes root/{train,val}/{cat,ant,bee}/ with small images: PNG (colour and grey) and
// JPEG, of several sizes; pixel value v(class) everywhere, so a sample's mean names its class.
func writeFolder(t *testing.T, root string, classes []string, perClass int) {
	t.Helper()
	for _, split := range []string{"train", "val"} {
		for ci, c := range classes {
			dir := filepath.Join(root, split, c)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < perClass; k++ {
				w, h := 20+7*k, 30-3*k
				v := uint8(40 * (ci + 1))
				var img image.Image
				switch k % 3 {
				case 0:
					g := image.NewGray(image.Rect(0, 0, w, h))
					for i := range g.Pix {
						g.Pix[i] = v
					}
					img = g
				default:
					m := image.NewNRGBA(image.Rect(0, 0, w, h))
					for y := 0; y < h; y++ {
						for x := 0; x < w; x++ {
							m.SetNRGBA(x, y, color.NRGBA{v, v, v, 255})
						}
					}
					img = m
				}
				name := filepath.Join(dir, string(rune('a'+k)))
				f, err := os.Create(name + map[bool]string{true: ".jpg", false: ".png"}[k%3 == 2])
				if err != nil {
					t.Fatal(err)
				}
				if k%3 == 2 {
					err = jpeg.Encode(f, img, &jpeg.Options{Quality: 100})
				} else {
					err = png.Encode(f, img)
				}
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}
	}
	// Not images, not classes: ignored.
	os.WriteFile(filepath.Join(root, "train", classes[0], "README.txt"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(root, "train", ".ipynb_checkpoints"), 0o755)
}

func folderCfg(size int) ImageFolderConfig {
	return ImageFolderConfig{Size: size, Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.25, 0.25, 0.25}, Seed: 7}
}

func TestImageFolder_classesLabelsAndPixels(t *testing.T) {
	root := t.TempDir()
	writeFolder(t, root, []string{"cat", "ant", "bee"}, 3)
	tr, va, err := LoadImageFolder(root, folderCfg(8))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.Classes, ","); got != "ant,bee,cat" {
		t.Fatalf("classes %s, want sorted ant,bee,cat", got)
	}
	if tr.Len() != 9 || va.Len() != 9 {
		t.Fatalf("len %d/%d, want 9/9 (the .txt ignored)", tr.Len(), va.Len())
	}
	for _, ds := range []*ImageFolder{tr, va} {
		l, err := NewEvalLoader(ds, LoaderConfig{MicroBatch: 4, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		for {
			b, err := l.Next(context.Background())
			if err != nil {
				break
			}
			F := 3 * 8 * 8
			for i := 0; i < b.Size; i++ {
				label := ds.Labels[b.Indices[i]]
				if b.Y[i] != label {
					t.Fatalf("label %d, want %d", b.Y[i], label)
				}
				// Written in the order cat, ant, bee (v = 40, 80, 120); sorted: ant 0, bee 1, cat 2.
				v := map[int32]float64{0: 80, 1: 120, 2: 40}[label] / 255
				want := (v - 0.5) / 0.25
				for _, x := range b.X[i*F : (i+1)*F] {
					if math.Abs(float64(x)-want) > 0.03 { // JPEG's rounding
						t.Fatalf("%s: pixel %g, want %g", ds.Files[b.Indices[i]], x, want)
					}
				}
			}
			l.Release(b)
		}
		l.Close()
	}
}

// The augmentation is a function of (seed, epoch, index): the same on any worker, different
// across epochs.
func TestImageFolder_augmentationDeterministic(t *testing.T) {
	root := t.TempDir()
	writeFolder(t, root, []string{"a", "b"}, 2)
	// Give the images structure so crops and flips show.
	f := filepath.Join(root, "train", "a", "a.png")
	m := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for y := 0; y < 30; y++ {
		for x := 0; x < 40; x++ {
			m.SetNRGBA(x, y, color.NRGBA{uint8(6 * x), uint8(8 * y), uint8(x * y), 255})
		}
	}
	fh, _ := os.Create(f)
	png.Encode(fh, m)
	fh.Close()
	tr, _, err := LoadImageFolder(root, folderCfg(16))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := make([]float32, 3*16*16), make([]float32, 3*16*16), make([]float32, 3*16*16)
	if err := tr.Sample(a, 0, 0); err != nil {
		t.Fatal(err)
	}
	tr.Sample(b, 0, 0)
	tr.Sample(c, 1, 0)
	same := func(x, y []float32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("same (seed, epoch, index) gave different samples")
	}
	if same(a, c) {
		t.Fatal("epochs 0 and 1 gave the same augmentation")
	}
}

func TestRandomResizedCrop_inBoundsAndFallback(t *testing.T) {
	for s := uint64(0); s < 2000; s++ {
		rng := sampleRNG{s: s}
		H, W := 10+int(s%50), 5+int(s%97)
		top, left, h, w := randomResizedCrop(&rng, H, W)
		if h < 1 || w < 1 || top < 0 || left < 0 || top+h > H || left+w > W {
			t.Fatalf("%dx%d: crop top %d left %d %dx%d out of bounds", H, W, top, left, h, w)
		}
	}
	// A 1×100 strip never fits a ratio in [3/4, 4/3] by area: the fallback is the centre crop.
	rng := sampleRNG{s: 1}
	top, left, h, w := randomResizedCrop(&rng, 1, 100)
	if h != 1 || w != 1 || top != 0 || left != 49 {
		t.Fatalf("fallback crop top %d left %d %dx%d, want the centre 1x1", top, left, h, w)
	}
}

// Classes and images reached through symbolic links count (trees of links are common).
func TestImageFolder_followsSymlinks(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	writeFolder(t, src, []string{"a", "b"}, 2)
	for _, split := range []string{"train", "val"} {
		os.MkdirAll(filepath.Join(root, split, "a"), 0o755)
		os.Symlink(filepath.Join(src, split, "b"), filepath.Join(root, split, "b"))
		ents, _ := os.ReadDir(filepath.Join(src, split, "a"))
		for _, e := range ents {
			os.Symlink(filepath.Join(src, split, "a", e.Name()), filepath.Join(root, split, "a", e.Name()))
		}
	}
	tr, _, err := LoadImageFolder(root, folderCfg(8))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 4 || strings.Join(tr.Classes, ",") != "a,b" {
		t.Fatalf("%d images in %v, want 4 in a,b", tr.Len(), tr.Classes)
	}
}

func TestImageFolder_errorsNameTheFile(t *testing.T) {
	root := t.TempDir()
	writeFolder(t, root, []string{"a", "b"}, 2)
	bad := filepath.Join(root, "train", "b", "zz.png")
	os.WriteFile(bad, []byte("not a png"), 0o644)
	tr, _, err := LoadImageFolder(root, folderCfg(8))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewEvalLoader(tr, LoaderConfig{MicroBatch: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Next(context.Background())
	if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v, want one line naming %s", err, bad)
	}
}

func TestImageFolder_badLayouts(t *testing.T) {
	t.Run("no classes", func(t *testing.T) {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "train"), 0o755)
		_, _, err := LoadImageFolder(root, folderCfg(8))
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "train")) {
			t.Fatalf("err %v, want the train directory named", err)
		}
	})
	t.Run("empty class", func(t *testing.T) {
		root := t.TempDir()
		writeFolder(t, root, []string{"a", "b"}, 1)
		empty := filepath.Join(root, "val", "c")
		os.MkdirAll(empty, 0o755)
		_, _, err := LoadImageFolder(root, folderCfg(8))
		if err == nil || !strings.Contains(err.Error(), empty) {
			t.Fatalf("err %v, want %s named", err, empty)
		}
	})
	t.Run("classes differ", func(t *testing.T) {
		root := t.TempDir()
		writeFolder(t, root, []string{"a", "b"}, 1)
		os.RemoveAll(filepath.Join(root, "val", "b"))
		_, _, err := LoadImageFolder(root, folderCfg(8))
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "train")) || !strings.Contains(err.Error(), filepath.Join(root, "val")) {
			t.Fatalf("err %v, want both splits named", err)
		}
	})
}

// BenchmarkImageFolder_sample decodes and transforms one image per op from the folder in
// $GODDP_BENCH_IMAGES (e.g. `ddpbench images --synthetic-jpeg`), skipped without it.
func BenchmarkImageFolder_sample(b *testing.B) {
	root := os.Getenv("GODDP_BENCH_IMAGES")
	if root == "" {
		b.Skip("GODDP_BENCH_IMAGES is not set")
	}
	tr, _, err := LoadImageFolder(root, ImageFolderConfig{Size: 224, Mean: ImageNetMean, Std: ImageNetStd, Seed: 1, Train: true})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, 3*224*224)
	for i := 0; i < b.N; i++ {
		if err := tr.Sample(dst, 0, i%tr.Len()); err != nil {
			b.Fatal(err)
		}
	}
}
