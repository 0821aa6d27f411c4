package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/worker/data"
)

func init() {
	register("images", subcommand{summary: "image folders (data.kind: image_folder): write MNIST as one, or measure the loader's images/s", run: runImages})
}

// ddpbench images --from-mnist DIR [--mnist MNISTDIR] [--limit N]
// ddpbench images --bench ROOT [--workers 1,2,4] [--size 224] [--batch 32] [--seconds 5]
func runImages(args []string) error {
	fs := pflag.NewFlagSet("images", pflag.ContinueOnError)
	from := fs.String("from-mnist", "", "write MNIST as an image folder DIR/{train,val}/0..9/*.png")
	mnist := fs.String("mnist", "", "MNIST's idx files (default: the GoMNIST module in the module cache)")
	limit := fs.Int("limit", 0, "with --from-mnist: at most N images per split (0: all 60000 + 10000)")
	synth := fs.String("synthetic-jpeg", "", "write an image folder DIR of made-up ImageNet-sized JPEGs (500×375, 10 classes) to benchmark decoding")
	count := fs.Int("count", 1000, "with --synthetic-jpeg: images per split")
	bench := fs.String("bench", "", "measure the training loader alone on the image folder ROOT")
	workers := fs.String("workers", "1,2,4", "with --bench: loader worker counts to measure")
	size := fs.Int("size", 224, "with --bench: data.image_size")
	batch := fs.Int("batch", 32, "with --bench: images per batch")
	secs := fs.Float64("seconds", 5, "with --bench: how long to measure each worker count")
	if err := fs.Parse(args); err != nil {
		return err
	}
	modes := 0
	for _, m := range []string{*from, *synth, *bench} {
		if m != "" {
			modes++
		}
	}
	switch {
	case modes != 1:
		return errors.New("one of --from-mnist DIR, --synthetic-jpeg DIR and --bench ROOT is required")
	case *synth != "":
		start := time.Now()
		if err := writeSyntheticJPEGs(*synth, *count); err != nil {
			return err
		}
		fmt.Printf("wrote 2×%d JPEGs (500×375) to %s in %.1fs\n", *count, *synth, time.Since(start).Seconds())
		return nil
	case *from != "":
		dir := *mnist
		if dir == "" {
			var err error
			if dir, err = data.DefaultPath("mnist"); err != nil {
				return err
			}
		}
		start := time.Now()
		tr, va, err := data.WriteMNISTFolder(dir, *from, *limit)
		if err != nil {
			return err
		}
		fmt.Printf("wrote %d training and %d validation images to %s in %.1fs (data.kind: image_folder, data.path: %s)\n",
			tr, va, *from, time.Since(start).Seconds(), *from)
		return nil
	}
	var counts []int
	for _, s := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--workers %q: want a list of counts >= 1", *workers)
		}
		counts = append(counts, n)
	}
	tr, _, err := data.LoadImageFolder(*bench, data.ImageFolderConfig{Size: *size, Mean: data.ImageNetMean, Std: data.ImageNetStd, Seed: 1})
	if err != nil {
		return err
	}
	fmt.Printf("image folder %s: %d training images in %d classes; batches of %d, %dx%d samples, random-resized-crop + flip; GOMAXPROCS %d\n",
		*bench, tr.Len(), len(tr.Classes), *batch, *size, *size, runtime.GOMAXPROCS(0))
	fmt.Printf("%8s %12s %10s\n", "workers", "images/s", "batches")
	for _, w := range counts {
		rate, n, err := loaderRate(tr, w, *batch, time.Duration(*secs*float64(time.Second)))
		if err != nil {
			return err
		}
		fmt.Printf("%8d %12.0f %10d\n", w, rate, n)
	}
	return nil
}

// loaderRate runs a training loader with w workers over ds for about d (after one warm-up batch)
// and returns its images/s and the batches measured.
func loaderRate(ds data.Dataset, w, batch int, d time.Duration) (float64, int, error) {
	l, err := data.NewLoader(ds, data.LoaderConfig{MicroBatch: batch, Workers: w, Prefetch: 2 * w, Shuffle: true, Seed: 1})
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	ctx := context.Background()
	b, err := l.Next(ctx)
	if err != nil {
		return 0, 0, err
	}
	l.Release(b)
	start, n, imgs := time.Now(), 0, 0
	for time.Since(start) < d {
		b, err := l.Next(ctx)
		if err != nil {
			return 0, 0, err
		}
		imgs += b.Size
		n++
		l.Release(b)
	}
	return float64(imgs) / time.Since(start).Seconds(), n, nil
}

// writeSyntheticJPEGs writes dir/{train,val}/c0..c9/NNNNN.jpg: n 500×375 JPEGs (quality 90) per
// split of smooth colour ramps with a little noise, ImageNet's typical size, so a benchmark
// decodes what an ImageNet run decodes.
func writeSyntheticJPEGs(dir string, n int) error {
	const W, H = 500, 375
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	seed := uint32(1)
	for _, split := range []string{"train", "val"} {
		for i := 0; i < n; i++ {
			cdir := filepath.Join(dir, split, fmt.Sprintf("c%d", i%10))
			if err := os.MkdirAll(cdir, 0o755); err != nil {
				return err
			}
			for y := 0; y < H; y++ {
				for x := 0; x < W; x++ {
					seed = seed*1664525 + 1013904223
					nz := uint8(seed >> 28)
					img.SetRGBA(x, y, color.RGBA{uint8(x*255/W) + nz, uint8(y*255/H) + nz, uint8((x+y+17*i)%256) + nz, 255})
				}
			}
			f, err := os.Create(filepath.Join(cdir, fmt.Sprintf("%05d.jpg", i)))
			if err != nil {
				return err
			}
			err = jpeg.Encode(f, img, &jpeg.Options{Quality: 90})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
