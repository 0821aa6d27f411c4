package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/link"
)

// `ddpbench allreduce` starts N processes of itself over loopback (the hidden
// `allreduce-worker` subcommand, configured through the same environment torchrun sets) and
// prints an nccl-tests-style table of all-reduce times.

func init() {
	register("allreduce", subcommand{summary: "ring all-reduce bandwidth across N local processes", run: runAllReduceBench})
	register("allreduce-worker", subcommand{hidden: true, run: runAllReduceWorker})
}

// benchRow is one line of results (also the --json format).
type benchRow struct {
	World        int     `json:"world"`
	Bytes        int64   `json:"bytes"`
	Wire         string  `json:"wire"`
	Sec          float64 `json:"sec"`
	AlgBW        float64 `json:"algbw_GBs"`
	BusBW        float64 `json:"busbw_GBs"`
	WireBusBW    float64 `json:"wire_busbw_GBs"`
	MinSec       float64 `json:"min_sec"`
	Iters        int     `json:"iters"`
	ChunkBytes   int     `json:"chunk_bytes"`
	BytesPerRank int64   `json:"wire_bytes_sent_per_rank"`
	Transport    string  `json:"transport"`
	Channels     int     `json:"channels"`
}

type benchFlags struct {
	nproc   int
	sizes   []string
	wires   []string
	iters   int
	warmup  int
	chunk   string
	trans   string
	chans   int
	timeout time.Duration
	json    bool
	device  string
}

func (f *benchFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.nproc, "nproc", 2, "processes (ranks) to start")
	fs.StringSliceVar(&f.sizes, "sizes", []string{"1M", "16M", "64M", "256M"}, "FP32 buffer sizes in bytes (K, M, G suffixes are powers of 2)")
	fs.StringSliceVar(&f.wires, "wire", []string{"f32", "f16"}, "wire formats to measure")
	fs.IntVar(&f.iters, "iters", 10, "timed iterations per size and wire (the median is reported)")
	fs.IntVar(&f.warmup, "warmup", 2, "untimed iterations first")
	fs.StringVar(&f.chunk, "chunk", "1M", "pipeline chunk in wire bytes (allreduce.Config.ChunkBytes)")
	defTrans := getenv(allreduce.EnvTransport)
	if defTrans == "" {
		defTrans = link.TransportGRPC
	}
	fs.StringVar(&f.trans, "transport", defTrans, "data plane: grpc (default) or tcp (raw TCP, gRPC rendezvous); default from "+allreduce.EnvTransport)
	fs.IntVar(&f.chans, "channels", 1, "process groups over the same ranks; the buffer is cut into this many pieces, all-reduced at once, one per group (as ddp.channels does with buckets)")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "per-collective peer timeout")
	fs.BoolVar(&f.json, "json", false, "one JSON object per result line instead of a table")
	fs.StringVar(&f.device, "device", "cpu", "cpu: the host ring; cuda: also the all-reduce on the GPU over CUDA IPC buffers (transport cuda-ipc rows; a CUDA build; not yet run on a GPU)")
}

func (f *benchFlags) args() []string {
	return []string{"--sizes", strings.Join(f.sizes, ","), "--wire", strings.Join(f.wires, ","),
		"--iters", strconv.Itoa(f.iters), "--warmup", strconv.Itoa(f.warmup), "--chunk", f.chunk,
		"--transport", f.trans, "--channels", strconv.Itoa(f.chans), "--timeout", f.timeout.String(), "--device", f.device}
}

// parseBytes reads 64M, 1G, 4096, 1.5M.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	t := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "B"), "i"))
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(v * float64(mult)), nil
}

func runAllReduceBench(args []string) error {
	fs := pflag.NewFlagSet("allreduce", pflag.ContinueOnError)
	var f benchFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ddpbench allreduce --nproc N --sizes 1M,16M,64M,256M --wire f32,f16,bf16 [--json] [--iters K]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if f.nproc < 1 {
		return fmt.Errorf("--nproc must be at least 1")
	}
	for _, s := range f.sizes {
		if _, err := parseBytes(s); err != nil {
			return err
		}
	}
	for _, w := range f.wires {
		if _, err := allreduce.ParseWire(w); err != nil {
			return err
		}
	}
	if err := f.checkDevice(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	tok := make([]byte, 16)
	rand.Read(tok)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	rows := make(chan benchRow)
	errs := make([]error, f.nproc)
	var wg sync.WaitGroup
	for r := range f.nproc {
		cmd := exec.CommandContext(ctx, exe, append([]string{"allreduce-worker"}, f.args()...)...)
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(f.nproc), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(f.nproc), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"DDP_TOKEN="+hex.EncodeToString(tok))
		cmd.Stderr = os.Stderr
		var out io.ReadCloser
		if r == 0 {
			if out, err = cmd.StdoutPipe(); err != nil {
				return err
			}
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start rank %d: %w", r, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out != nil {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					var row benchRow
					if json.Unmarshal(sc.Bytes(), &row) == nil {
						rows <- row
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel() // one rank failing ends the run
			}
		}()
	}
	go func() { wg.Wait(); close(rows) }()

	var tw *tabwriter.Writer
	if !f.json {
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "transport\tchannels\tworld\tbytes\twire\ttime(ms)\talgbw(GB/s)\tbusbw(GB/s)\twire busbw(GB/s)\t\n")
	}
	for row := range rows {
		if f.json {
			b, _ := json.Marshal(row)
			fmt.Println(string(b))
			continue
		}
		// The table is printed at the end, aligned; progress goes to stderr meanwhile.
		fmt.Fprintf(os.Stderr, "ddpbench: %d bytes %s: %.3f ms\n", row.Bytes, row.Wire, row.Sec*1e3)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t\n", row.Transport, row.Channels, row.World, row.Bytes, row.Wire, row.Sec*1e3, row.AlgBW, row.BusBW, row.WireBusBW)
	}
	if tw != nil {
		tw.Flush()
	}
	return errors.Join(errs...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAllReduceWorker is one rank: it joins the group from the environment, runs every size and
// wire, and (rank 0) prints one JSON row per measurement on stdout.
func runAllReduceWorker(args []string) error {
	fs := pflag.NewFlagSet("allreduce-worker", pflag.ContinueOnError)
	var f benchFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := allreduce.ConfigFromEnv()
	if err != nil {
		return err
	}
	if prefix := getenv("DDPBENCH_CPUPROFILE"); prefix != "" { // profiling aid: one file per rank
		pf, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, cfg.Rank))
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	chunk, err := parseBytes(f.chunk)
	if err != nil {
		return err
	}
	cfg.ChunkBytes = int(chunk)
	cfg.TransportKind = f.trans
	cfg.Timeout = f.timeout
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	g, err := allreduce.NewGroup(ctx, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	if f.chans < 1 {
		return fmt.Errorf("ddpbench: --channels %d: want ≥ 1", f.chans)
	}
	extra, err := allreduce.OpenChannels(ctx, g, cfg, f.chans)
	if err != nil {
		return err
	}
	for _, x := range extra {
		defer x.Close()
	}
	groups := append([]*allreduce.Group{g}, extra...)
	n := g.Size()
	dev, err := f.openDevice(g.Rank())
	if err != nil {
		return err
	}
	if c, ok := dev.(interface{ Close() error }); ok {
		defer c.Close()
	}
	for _, s := range f.sizes {
		nbytes, _ := parseBytes(s)
		buf := make([]float32, nbytes/4)
		for i := range buf {
			buf[i] = float32(math.Sin(float64(i)*0.001 + float64(g.Rank()))) // values in range; Avg keeps them there
		}
		for _, ws := range f.wires {
			wire, _ := allreduce.ParseWire(ws)
			times := make([]float64, 0, f.iters)
			var sent0 int64
			for it := range f.warmup + f.iters {
				if err := g.Barrier(ctx); err != nil {
					return err
				}
				if it == f.warmup {
					sent0 = bytesSent(groups)
				}
				t0 := time.Now()
				if err := allReduceOver(ctx, groups, buf, wire); err != nil {
					return err
				}
				if it >= f.warmup {
					times = append(times, time.Since(t0).Seconds())
				}
			}
			sentPerIter := (bytesSent(groups) - sent0) / int64(max(f.iters, 1))
			// The slowest rank's time is the collective's time, iteration by iteration.
			worst, err := maxAcrossRanks(ctx, g, times)
			if err != nil {
				return err
			}
			if g.Rank() == 0 {
				row := rowOf(worst, n, nbytes, wire, f.iters)
				row.ChunkBytes, row.BytesPerRank, row.Transport, row.Channels = cfg.ChunkBytes, sentPerIter, f.trans, len(groups)
				b, _ := json.Marshal(row)
				fmt.Println(string(b))
			}
			if dev != nil {
				if err := benchDevice(ctx, g, dev, buf, wire, f); err != nil {
					return err
				}
			}
		}
	}
	return g.Barrier(ctx)
}

// rowOf is the row of one measurement: the median of the slowest rank's times, algbw as the FP32
// buffer's bytes per second, busbw as nccl-tests computes it (algbw · 2(n−1)/n) and the wire's
// share of it.
func rowOf(worst []float64, n int, nbytes int64, wire allreduce.Wire, iters int) benchRow {
	slices.Sort(worst)
	med := worst[len(worst)/2]
	if len(worst)%2 == 0 {
		med = (worst[len(worst)/2-1] + worst[len(worst)/2]) / 2
	}
	alg := float64(nbytes) / med / 1e9
	bus := alg * 2 * float64(n-1) / float64(n)
	return benchRow{World: n, Bytes: nbytes, Wire: wire.String(), Sec: med, AlgBW: alg, BusBW: bus,
		WireBusBW: bus * float64(wire.ElemBytes()) / 4, MinSec: worst[0], Iters: iters}
}

// bytesSent is what this rank has sent over all the groups.
func bytesSent(groups []*allreduce.Group) int64 {
	var n int64
	for _, g := range groups {
		n += g.Stats().BytesSent
	}
	return n
}

// allReduceOver averages buf across the ranks, cut into len(groups) contiguous pieces that are
// all-reduced at once, one per group (one group: a plain AllReduce).
func allReduceOver(ctx context.Context, groups []*allreduce.Group, buf []float32, wire allreduce.Wire) error {
	if len(groups) == 1 {
		return groups[0].AllReduce(ctx, buf, allreduce.Avg, wire)
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	piece := (len(buf) + len(groups) - 1) / len(groups)
	for i, gr := range groups {
		lo, hi := min(i*piece, len(buf)), min((i+1)*piece, len(buf))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = gr.AllReduce(ctx, buf[lo:hi], allreduce.Avg, wire)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// maxAcrossRanks returns, per iteration, the largest time any rank measured.
func maxAcrossRanks(ctx context.Context, g *allreduce.Group, times []float64) ([]float64, error) {
	b := make([]byte, 8*len(times))
	for i, t := range times {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(t))
	}
	all, err := g.AllGather(ctx, b)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(times)
	for _, rb := range all {
		for i := range min(len(out), len(rb)/8) {
			out[i] = max(out[i], math.Float64frombits(binary.LittleEndian.Uint64(rb[8*i:])))
		}
	}
	return out, nil
}
