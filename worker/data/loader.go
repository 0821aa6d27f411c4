package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("data: loader closed")

// LoaderConfig configures a training Loader. Zero values take the defaults
// in brackets.
type LoaderConfig struct {
	MicroBatch int // b: samples per micro-batch on this rank
	Accum      int // k: micro-batches per optimizer step [1]
	Rank       int // r: this rank, 0..World-1
	World      int // W: data-parallel ranks [1]

	Seed    uint64 // the shuffle of epoch e is Permutation(N, Seed, e)
	Shuffle bool   // false: every epoch in index order

	Workers  int // goroutines assembling batches [1]
	Prefetch int // batches assembled ahead of Next, beyond one per worker [2]

	Start LoaderState // where to begin (a resumed run's saved State)
	Alloc Allocator   // batch buffers [HeapAllocator]

	// Eval-only (NewEvalLoader): stop after this many global batches; 0 = all.
	MaxBatches int
}

// LoaderState is a position in the training stream: the next optimizer step
// to run. Saved in checkpoints; LoaderConfig.Start resumes from it.
type LoaderState struct {
	Epoch int `json:"epoch"`
	Step  int `json:"step"`
}

// job is one batch to assemble: sequence number n of the stream.
type job struct {
	epoch, step, micro int
	idx                []int // read-only view into an epoch's permutation
	out                chan *Batch
}

// Loader delivers micro-batches in a fixed order, assembled ahead of time by
// background workers. Its goroutines:
//
//	dispatcher ──jobs──▶ workers (Workers of them) ──fill──▶ job.out
//	     └────order (cap Prefetch)──────────────────────────▶ Next
//
// The dispatcher plans batch after batch (epoch permutation, sharding), queues
// each batch's result channel on `order` in sequence and hands the job to
// any free worker. Next takes result channels from `order` in sequence and
// waits on each: the order of delivery is the plan's whatever the number of
// workers. `order` holds Prefetch+Workers-1 jobs, so with the one Next waits
// on, Prefetch+Workers batches are ready or in assembly ahead of the trainer:
// every worker busy while Prefetch wait ready. (With room for Prefetch only,
// at most Prefetch+1 workers ever ran: data.workers 8, prefetch 2 filled 3
// batches at a time.)
// The workers and queue persist across epochs.
//
// Next, Peek and State are for one consumer goroutine; Release and Close may
// be called from any.
type Loader struct {
	ds     Dataset
	cfg    LoaderConfig
	layout Layout
	cap    int // samples per batch buffer

	// plan(n) describes batch n of the stream; ok false ends the stream.
	plan func(n int) (j job, ok bool)
	// state(n) is the LoaderState of batch n (the start of its step).
	state func(n int) LoaderState

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	order  chan *job

	stepsPerEpoch int

	next    int    // sequence number of the next batch Next returns
	pending *job   // taken from order but not yet delivered (Next interrupted)
	peeked  *Batch // delivered to Peek, not yet to Next

	mu   sync.Mutex
	free []*Batch
	all  []*Batch
}

// NewLoader starts a training loader: an endless stream of micro-batches, in
// the order step 0 micro 0..k-1, step 1 …, crossing epochs by itself, each
// batch tagged with its Epoch, Step and Micro. It follows the sharding
// contract of the package comment: with G = b·k·W, step s of an epoch is
// perm[s*G:(s+1)*G], and this rank's micro m is perm[s*G+(m*W+r)*b:][:b].
// StepsPerEpoch = floor(N/G): the remainder of each epoch is dropped, so
// across ranks every sample is used at most once per epoch.
func NewLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	cfg = withDefaults(cfg)
	if err := checkRank(cfg); err != nil {
		return nil, err
	}
	b, k, W, r := cfg.MicroBatch, cfg.Accum, cfg.World, cfg.Rank
	G := b * k * W
	N := ds.Len()
	spe := N / G
	if spe == 0 {
		return nil, fmt.Errorf("data: global batch %d (micro_batch %d × accum %d × world %d) is larger than the data set's %d samples", G, b, k, W, N)
	}
	if cfg.Start.Epoch < 0 || cfg.Start.Step < 0 || cfg.Start.Step >= spe {
		return nil, fmt.Errorf("data: resume state epoch %d step %d outside 0..%d steps per epoch", cfg.Start.Epoch, cfg.Start.Step, spe-1)
	}
	l := newLoader(ds, cfg, b)
	l.next = (cfg.Start.Epoch*spe + cfg.Start.Step) * k
	var permEpoch = -1
	var perm []int
	l.plan = func(n int) (job, bool) {
		e, s, m := n/(spe*k), (n/k)%spe, n%k
		if e != permEpoch {
			if cfg.Shuffle {
				perm = Permutation(N, cfg.Seed, e)
			} else {
				perm = make([]int, N)
				for i := range perm {
					perm[i] = i
				}
			}
			permEpoch = e
		}
		off := s*G + (m*W+r)*b
		return job{epoch: e, step: s, micro: m, idx: perm[off : off+b]}, true
	}
	l.state = func(n int) LoaderState { return LoaderState{Epoch: n / (spe * k), Step: (n / k) % spe} }
	l.stepsPerEpoch = spe
	l.start()
	return l, nil
}

// NewEvalLoader starts a loader for one pass over an evaluation set: no
// shuffle, batches of MicroBatch samples in index order (the last one
// partial), global batch j going to rank j mod World (rank r gets r, r+W, …),
// at most MaxBatches global batches when set. Next returns io.EOF at the end.
// Batch.Step is the global batch number j. Accum, Seed, Shuffle and Start are
// ignored.
func NewEvalLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	cfg = withDefaults(cfg)
	if err := checkRank(cfg); err != nil {
		return nil, err
	}
	b, W, r, N := cfg.MicroBatch, cfg.World, cfg.Rank, ds.Len()
	nb := (N + b - 1) / b
	if cfg.MaxBatches > 0 && cfg.MaxBatches < nb {
		nb = cfg.MaxBatches
	}
	l := newLoader(ds, cfg, b)
	l.plan = func(n int) (job, bool) {
		j := r + n*W
		if j >= nb {
			return job{}, false
		}
		lo, hi := j*b, min((j+1)*b, N)
		idx := make([]int, hi-lo)
		for i := range idx {
			idx[i] = lo + i
		}
		return job{step: j, idx: idx}, true
	}
	l.state = func(n int) LoaderState { return LoaderState{Step: r + n*W} }
	l.stepsPerEpoch = (nb - r + W - 1) / W // this rank's batch count
	l.start()
	return l, nil
}

func withDefaults(c LoaderConfig) LoaderConfig {
	if c.Accum == 0 {
		c.Accum = 1
	}
	if c.World == 0 {
		c.World = 1
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2
	}
	if c.Alloc == nil {
		c.Alloc = HeapAllocator{}
	}
	return c
}

func checkRank(c LoaderConfig) error {
	switch {
	case c.MicroBatch < 1:
		return fmt.Errorf("data: micro batch %d: want >= 1", c.MicroBatch)
	case c.Accum < 1:
		return fmt.Errorf("data: accumulation steps %d: want >= 1", c.Accum)
	case c.World < 1 || c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("data: rank %d of world %d: want 0 <= rank < world", c.Rank, c.World)
	}
	return nil
}

func newLoader(ds Dataset, cfg LoaderConfig, capacity int) *Loader {
	ctx, cancel := context.WithCancel(context.Background())
	return &Loader{ds: ds, cfg: cfg, layout: ds.Layout(), cap: capacity, ctx: ctx, cancel: cancel,
		order: make(chan *job, cfg.Prefetch+cfg.Workers-1)}
}

// start launches the dispatcher and the workers.
func (l *Loader) start() {
	jobs := make(chan *job)
	l.wg.Add(1 + l.cfg.Workers)
	go func() { // dispatcher
		defer l.wg.Done()
		defer close(jobs)
		defer close(l.order)
		for n := l.next; ; n++ {
			j, ok := l.plan(n)
			if !ok {
				return
			}
			j.out = make(chan *Batch, 1)
			jp := &j
			select {
			case l.order <- jp:
			case <-l.ctx.Done():
				return
			}
			select {
			case jobs <- jp:
			case <-l.ctx.Done():
				return
			}
		}
	}()
	for w := 0; w < l.cfg.Workers; w++ {
		go func() {
			defer l.wg.Done()
			for j := range jobs {
				b := l.getBatch()
				b.Epoch, b.Step, b.Micro = j.epoch, j.step, j.micro
				b.Indices = append(b.Indices[:0], j.idx...)
				b.Err = nil
				l.ds.Fill(b, j.idx)
				j.out <- b // buffered: never blocks
			}
		}()
	}
}

func (l *Loader) getBatch() *Batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	b := newBatch(l.layout, l.cap, l.cfg.Alloc)
	l.all = append(l.all, b)
	return b
}

// Next returns the next micro-batch, waiting for it if the workers are
// behind. It returns ctx's error when ctx ends first (the batch is not lost:
// the next call returns it), ErrClosed after Close, and io.EOF at the end of
// an eval loader's pass, and the Dataset's error when a batch could not be
// filled (Batch.Err). The caller owns the batch until Release.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	if l.ctx.Err() != nil {
		return nil, ErrClosed
	}
	b := l.peeked
	if b == nil {
		var err error
		if b, err = l.take(ctx); err != nil {
			return nil, err
		}
	}
	l.peeked = nil
	if err := b.Err; err != nil {
		l.Release(b) // the stream stops here: the same batch would fail again
		return nil, err
	}
	l.next++
	return b, nil
}

// Peek returns the batch the next call of Next will return, waiting for it as Next does, without
// moving the stream: State is unchanged, and Next then returns this very batch (the trainer
// uploads the next micro-batch while the current one's backward runs, and a checkpoint written
// in between still resumes at the batch not yet trained on). The caller may read the batch but
// must not Release it: it is the loader's until Next has returned it. Errors are Next's; a batch
// that could not be filled is Next's error too.
func (l *Loader) Peek(ctx context.Context) (*Batch, error) {
	if l.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if l.peeked == nil {
		b, err := l.take(ctx)
		if err != nil {
			return nil, err
		}
		l.peeked = b
	}
	if err := l.peeked.Err; err != nil {
		return nil, err
	}
	return l.peeked, nil
}

// take waits for the next batch of the stream (Next and Peek).
func (l *Loader) take(ctx context.Context) (*Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.pending == nil {
		select {
		case j, ok := <-l.order:
			if !ok {
				if l.ctx.Err() != nil {
					return nil, ErrClosed
				}
				return nil, io.EOF
			}
			l.pending = j
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.ctx.Done():
			return nil, ErrClosed
		}
	}
	select {
	case b := <-l.pending.out:
		l.pending = nil
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, ErrClosed
	}
}

// Release hands a batch from Next back for reuse. The caller must not touch
// it afterwards. Releasing is optional; unreleased batches are garbage
// collected (heap allocator) and the loader allocates new ones.
func (l *Loader) Release(b *Batch) {
	if b == nil {
		return
	}
	l.mu.Lock()
	l.free = append(l.free, b)
	l.mu.Unlock()
}

// State is the position of the next batch Next will return, as the start of
// its optimizer step. Between optimizer steps (all k micro-batches of the
// last step consumed), this is exactly the next step; mid-step it is the
// step in progress, which a resumed loader replays from micro-batch 0.
func (l *Loader) State() LoaderState { return l.state(l.next) }

// StepsPerEpoch is floor(N / (b·k·W)) for a training loader, and this rank's
// number of batches for an eval loader.
func (l *Loader) StepsPerEpoch() int { return l.stepsPerEpoch }

// Close stops the goroutines and waits for them. With an allocator that can
// free (Freer), every batch buffer is freed, so no batch from Next may be used
// after Close. Close is safe to call twice.
func (l *Loader) Close() {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.all {
		b.free(l.cfg.Alloc)
	}
	l.all, l.free = nil, nil
}
