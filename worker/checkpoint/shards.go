package checkpoint

// shards.go: sharded checkpoints (ddp.shard_optimizer, issue 31). A sharded run's checkpoint holds
// the optimizer state as one file per rank instead of optim.safetensors:
//
//	optim-rank-00000.safetensors   rank 0's packed state: each state tensor (AdamW's m and v,
//	optim-rank-00001.safetensors   SGD's momentum) of its shard's elements, in slab order
//	...
//
// and its manifest (format version 2) carries a "shards" record: the world size and bucket cap
// the shards were cut with, the slab length, and each rank's ranges of the slab (ddp.PlanShard:
// its ring segment of every bucket). Every shard file is listed with its size and sha256 like the
// other files, so Verify, Latest's fallback, Prune's size check and Sync's copy cover them. The
// other files (model.safetensors with the whole f32 master weights, state.json, config.json) are
// the unsharded checkpoint's. An unsharded run writes format 1, as before.
//
// Who writes: the writers of today (rank 0; with checkpoint.per_host each host's local rank 0).
// Every rank sends its shard file's bytes to them around the group's all-gather ring (ddp's
// GatherShardFiles over allreduce's GatherTo: the whole state's bytes once around the ring, as the
// former gather of the state was), in which only the writers collect the files: every other rank
// passes each file on as it goes by, holding one file at most, so the whole state never lands in
// the memory of a rank that does not write it. Each writer's directory holds every shard and
// stands alone: a host's disk never depends on another's.
//
// Reading: a resume asks for the ranges its own shard holds now (Checkpoint.OptimRanges). It reads
// only the files whose recorded ranges overlap them, verifying each against the manifest first,
// and copies the overlapping values: at the same world size and bucket cap that is its own file
// alone, the very values it wrote; at another world size, or unsharded (the whole slab), the
// ranges it now owns from whichever files hold them. Values are copied, never recomputed, so a
// re-sharded resume is exact too.

import (
	"fmt"
	"regexp"
	"slices"
	"sort"

	"github.com/goddp/goddp/model"
)

// FormatSharded is the manifest format of a sharded checkpoint (one with a shards record); an
// unsharded one stays Format.
const FormatSharded = 2

// OptimRankFile is rank's optimizer shard file in a sharded checkpoint.
func OptimRankFile(rank int) string { return fmt.Sprintf("optim-rank-%05d.safetensors", rank) }

var optimRankRE = regexp.MustCompile(`^optim-rank-[0-9]{5}\.safetensors$`)

// ShardLayout is a sharded checkpoint's manifest record of how the optimizer state was cut.
type ShardLayout struct {
	WorldSize   int     `json:"world_size"`
	BucketCapMB float64 `json:"bucket_cap_mb"`
	// N is the parameter slab's length: the ranges of all ranks together cover [0, N) once.
	N int `json:"n"`
	// Ranks[r] are rank r's ranges [lo, hi) of the slab, ascending; its file packs them in order.
	Ranks [][][2]int `json:"ranks"`
}

// OptimShards is a sharded run's optimizer state as a writer saves it: the layout and each rank's
// shard file (EncodeOptimShard), indexed by rank.
type OptimShards struct {
	Layout ShardLayout
	Files  [][]byte
	// Master is the f32 master weights of the whole slab (N), gathered on the host
	// (ddp.Engine.MasterHost) when the rank holds only its shard of them (ddp.shard_master);
	// nil: Save reads them from the parameters, whole.
	Master []float32
}

// EncodeOptimShard is rank's shard file: its optimizer state tensors (packed, each of the shard's
// length) as f32 safetensors.
func EncodeOptimShard(state []model.NamedTensor, rank, world int) ([]byte, error) {
	return encodeSafetensors(state, map[string]string{"format": "pt", "rank": fmt.Sprint(rank), "world_size": fmt.Sprint(world)})
}

// check says whether the layout is whole: one rank's ranges per rank, each ascending and inside
// [0, N), and all of them together covering [0, N) exactly once.
func (l *ShardLayout) check() error {
	if l.WorldSize < 2 || len(l.Ranks) != l.WorldSize {
		return fmt.Errorf("shards: world size %d with %d ranks' ranges", l.WorldSize, len(l.Ranks))
	}
	var all [][2]int
	for r, rs := range l.Ranks {
		for i, x := range rs {
			if x[0] < 0 || x[1] < x[0] || x[1] > l.N || (i > 0 && x[0] < rs[i-1][1]) {
				return fmt.Errorf("shards: rank %d's range [%d, %d) is out of order or outside [0, %d)", r, x[0], x[1], l.N)
			}
			if x[1] > x[0] {
				all = append(all, x)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i][0] < all[j][0] })
	at := 0
	for _, x := range all {
		if x[0] != at {
			return fmt.Errorf("shards: the ranks' ranges leave a gap or overlap at element %d", at)
		}
		at = x[1]
	}
	if at != l.N {
		return fmt.Errorf("shards: the ranks' ranges end at element %d, the slab has %d", at, l.N)
	}
	return nil
}

// rankLen is the number of elements rank r's file packs.
func (l *ShardLayout) rankLen(r int) int {
	n := 0
	for _, x := range l.Ranks[r] {
		n += x[1] - x[0]
	}
	return n
}

// Sharded says whether the checkpoint's optimizer state is in per-rank files (then Optim is nil
// and OptimRanges reads it).
func (c *Checkpoint) Sharded() bool { return c.shards != nil }

// ShardWorld is the world size a sharded checkpoint's shards were cut with (0 when unsharded).
func (c *Checkpoint) ShardWorld() int {
	if c.shards == nil {
		return 0
	}
	return c.shards.WorldSize
}

// ShardFileFor is the rank whose shard file holds exactly ranges (a resume that reads that file
// alone, the very values it wrote), or -1 when the ranges are cut from the files anew: another
// world size, or the same one with another bucket cap, or an unsharded checkpoint.
func (c *Checkpoint) ShardFileFor(ranges [][2]int) int {
	if c.shards == nil {
		return -1
	}
	for r, rs := range c.shards.Ranks {
		if slices.Equal(rs, ranges) {
			return r
		}
	}
	return -1
}

// ShardBucketCapMB is the bucket cap a sharded checkpoint's shards were cut with (0 when unsharded).
func (c *Checkpoint) ShardBucketCapMB() float64 {
	if c.shards == nil {
		return 0
	}
	return c.shards.BucketCapMB
}

// OptimRanges reads the optimizer state tensors names for the slab ranges want (ascending, inside
// [0, n), n the model's slab length) from a sharded checkpoint: for each name, the values of want
// packed in order. It reads and verifies only the shard files whose ranges overlap want, and
// fails naming the file when one is missing, corrupt, or lacks a tensor. Nothing is returned
// half-read.
func (c *Checkpoint) OptimRanges(names []string, want [][2]int, n int) (map[string][]float32, error) {
	l := c.shards
	if l == nil {
		return nil, fmt.Errorf("checkpoint: %s is not sharded", c.Path)
	}
	if l.N != n {
		return nil, fmt.Errorf("checkpoint: %s: the optimizer shards cover %d elements, the model has %d", c.Path, l.N, n)
	}
	total := 0
	for _, w := range want {
		if w[0] < 0 || w[1] < w[0] || w[1] > n {
			return nil, fmt.Errorf("checkpoint: %s: range [%d, %d) outside the slab of %d", c.Path, w[0], w[1], n)
		}
		total += w[1] - w[0]
	}
	out := map[string][]float32{}
	for _, name := range names {
		out[name] = make([]float32, total)
	}
	for r, rs := range l.Ranks {
		var file map[string][]float32 // read at the first overlap
		src := 0
		for _, x := range rs {
			dst := 0
			for _, w := range want {
				lo, hi := max(x[0], w[0]), min(x[1], w[1])
				if hi > lo {
					if file == nil {
						var err error
						if file, err = c.readShard(r, names); err != nil {
							return nil, err
						}
					}
					for _, name := range names {
						copy(out[name][dst+lo-w[0]:dst+hi-w[0]], file[name][src+lo-x[0]:src+hi-x[0]])
					}
				}
				dst += w[1] - w[0]
			}
			src += x[1] - x[0]
		}
	}
	return out, nil
}

// readShard reads rank r's shard file, verified against the manifest, and returns the tensors
// names, each of the length the layout gives r.
func (c *Checkpoint) readShard(r int, names []string) (map[string][]float32, error) {
	f := OptimRankFile(r)
	b, err := readVerified(c.Path, f, c.files[f])
	if err != nil {
		return nil, err
	}
	ts, _, err := model.ParseSafetensors(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s/%s: %w", c.Path, f, err)
	}
	byName := map[string]model.NamedTensor{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	out := map[string][]float32{}
	for _, name := range names {
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s/%s has no optimizer state %q (another optimizer?)", c.Path, f, name)
		}
		if out[name], err = namedToF32Shape(t, []int{c.shards.rankLen(r)}); err != nil {
			return nil, fmt.Errorf("checkpoint: %s/%s: %w", c.Path, f, err)
		}
	}
	return out, nil
}
