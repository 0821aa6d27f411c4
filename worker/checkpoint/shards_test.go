package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// A slab of 10 elements cut over two ranks as ring segments of two buckets ([0,6) and [6,10))
// would be: rank 0 [0,3) and [6,8), rank 1 [3,6) and [8,10).
var testLayout = ShardLayout{WorldSize: 2, BucketCapMB: 0.25, N: 10, Ranks: [][][2]int{{{0, 3}, {6, 8}}, {{3, 6}, {8, 10}}}}

// wholeState is the unsharded m and v over the slab: m[i] = i + 0.5, v[i] = -i.
func wholeState() (m, v []float32) {
	for i := range 10 {
		m, v = append(m, float32(i)+0.5), append(v, -float32(i))
	}
	return m, v
}

// saveSharded writes a sharded checkpoint of step whose shard files hold wholeState cut by
// testLayout.
func saveSharded(t *testing.T, dir string, step int) string {
	t.Helper()
	m, v := wholeState()
	sh := &OptimShards{Layout: testLayout}
	for r, rs := range testLayout.Ranks {
		s := model.Shard{Ranges: rs}
		b, err := EncodeOptimShard([]model.NamedTensor{
			{Name: "adamw.m", DType: tensor.F32, Shape: []int{s.N()}, Data: model.F32Bytes(s.Pack(m))},
			{Name: "adamw.v", DType: tensor.F32, Shape: []int{s.N()}, Data: model.F32Bytes(s.Pack(v))},
		}, r, 2)
		if err != nil {
			t.Fatal(err)
		}
		sh.Files = append(sh.Files, b)
	}
	w, _ := ckptTensors(float32(step))
	spec := model.MLPConfig{Widths: []int{2, 2}}.Spec()
	p, err := SaveSharded(dir, step, spec, w, sh, testState{Step: step})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func packed(full []float32, rs [][2]int) []float32 { return (&model.Shard{Ranges: rs}).Pack(full) }

// A sharded checkpoint: one file per rank listed in a format-2 manifest with the layout; no
// optim.safetensors; Load leaves the shards alone; each rank's own ranges come from its own file
// only (the other's removed), other ranges are cut from whichever files hold them, exactly.
func TestSharded_writeAndReadBack(t *testing.T) {
	p := saveSharded(t, t.TempDir(), 30)
	b, err := os.ReadFile(filepath.Join(p, FileManifest))
	if err != nil {
		t.Fatal(err)
	}
	var man Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	if man.Format != FormatSharded || man.Shards == nil || man.Shards.WorldSize != 2 || man.Shards.N != 10 || man.Shards.BucketCapMB != 0.25 {
		t.Fatalf("manifest %s", b)
	}
	for _, f := range []string{"optim-rank-00000.safetensors", "optim-rank-00001.safetensors", FileWeights, FileState, FileConfig} {
		if _, ok := man.Files[f]; !ok {
			t.Errorf("the manifest does not list %s", f)
		}
	}
	if _, err := os.Stat(filepath.Join(p, FileOptim)); err == nil {
		t.Error("a sharded checkpoint has optim.safetensors")
	}
	if err := Verify(p); err != nil {
		t.Fatal(err)
	}
	m, v := wholeState()
	names := []string{"adamw.m", "adamw.v"}
	for r := range 2 {
		dir := t.TempDir()
		cp := filepath.Join(dir, filepath.Base(p))
		if err := os.CopyFS(cp, os.DirFS(p)); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(cp, OptimRankFile(1-r))) // the other rank's file: not read
		c, err := Load(cp)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Sharded() || c.ShardWorld() != 2 || c.Optim != nil || c.Spec == nil {
			t.Fatalf("loaded %+v", c)
		}
		got, err := c.OptimRanges(names, testLayout.Ranks[r], 10)
		if err != nil {
			t.Fatalf("rank %d, the other rank's file gone: %v", r, err)
		}
		if !slices.Equal(got["adamw.m"], packed(m, testLayout.Ranks[r])) || !slices.Equal(got["adamw.v"], packed(v, testLayout.Ranks[r])) {
			t.Fatalf("rank %d read %v", r, got)
		}
		// A range the other rank holds needs its file, and the error names it.
		if _, err := c.OptimRanges(names, [][2]int{{0, 10}}, 10); err == nil || !strings.Contains(err.Error(), OptimRankFile(1-r)) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("rank %d, whole slab without %s: %v", r, OptimRankFile(1-r), err)
		}
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][][2]int{
		{{0, 10}},                 // unsharded: the whole state
		{{0, 2}, {5, 7}},          // world 3, rank 0 of some layout: across both files
		{{2, 5}, {7, 9}},          // rank 1
		{{9, 10}},                 // rank 2
		{{0, 1}, {1, 2}, {2, 10}}, // adjacent ranges
		{{4, 4}, {6, 8}, {8, 8}},  // empty ranges
	} {
		got, err := c.OptimRanges(names, want, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got["adamw.m"], packed(m, want)) || !slices.Equal(got["adamw.v"], packed(v, want)) {
			t.Fatalf("ranges %v: read %v, want m %v", want, got, packed(m, want))
		}
	}
	if _, err := c.OptimRanges(names, [][2]int{{0, 10}}, 12); err == nil || !strings.Contains(err.Error(), "cover 10 elements, the model has 12") {
		t.Fatalf("another model's slab: %v", err)
	}
	if _, err := c.OptimRanges([]string{"sgd.momentum"}, [][2]int{{0, 3}}, 10); err == nil || !strings.Contains(err.Error(), `optim-rank-00000.safetensors has no optimizer state "sgd.momentum"`) {
		t.Fatalf("another optimizer's state: %v", err)
	}
}

// An unsharded checkpoint is written as before: format 1, optim.safetensors, no shards record.
func TestSharded_unshardedFormatUnchanged(t *testing.T) {
	p := saveTest(t, t.TempDir(), 5)
	b, err := os.ReadFile(filepath.Join(p, FileManifest))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "shards") || !strings.Contains(string(b), `"format_version": 1`) || !strings.Contains(string(b), FileOptim) {
		t.Fatalf("unsharded manifest %s", b)
	}
	c, err := Load(p)
	if err != nil || c.Sharded() || len(c.Optim) != 1 {
		t.Fatalf("Load = %+v, %v", c, err)
	}
}

// A corrupt or missing shard file is named by Verify and by the rank reading it; Latest skips
// that checkpoint for the older good one.
func TestSharded_damagedShard(t *testing.T) {
	dir := t.TempDir()
	old := saveSharded(t, dir, 10)
	p := saveSharded(t, dir, 20)
	f := filepath.Join(p, OptimRankFile(1))
	b, _ := os.ReadFile(f)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(p); err == nil || !strings.Contains(err.Error(), OptimRankFile(1)) || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("Verify: %v", err)
	}
	c, err := Load(p) // rank 0 alone would resume from it: its own file is good
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimRanges([]string{"adamw.m"}, testLayout.Ranks[0], 10); err != nil {
		t.Fatalf("rank 0's own file: %v", err)
	}
	if _, err := c.OptimRanges([]string{"adamw.m"}, testLayout.Ranks[1], 10); err == nil || !strings.Contains(err.Error(), OptimRankFile(1)) || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("rank 1's corrupt file: %v", err)
	}
	if got, err := Latest(dir); err != nil || got != old {
		t.Fatalf("Latest = %q, %v; want the older %s", got, err, old)
	}
	os.Remove(f)
	if err := Verify(p); err == nil || !strings.Contains(err.Error(), OptimRankFile(1)+": missing") {
		t.Fatalf("Verify without the file: %v", err)
	}
	if sizesMatch(p) {
		t.Error("Prune's check counts a checkpoint without a shard file as complete")
	}
}

// A sharded checkpoint travels to another host (Sync's bundle) with its shard files, and the copy
// verifies; a bundle's shard file that does not match the manifest is refused, naming it.
func TestSharded_receivedCopy(t *testing.T) {
	src := saveSharded(t, t.TempDir(), 20)
	bundle, err := packCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	files, err := unpackCheckpoint(bundle)
	if err != nil {
		t.Fatal(err)
	}
	got, err := writeCheckpointFiles(t.TempDir(), 20, files)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		a, _ := os.ReadFile(filepath.Join(src, OptimRankFile(r)))
		b, err := os.ReadFile(filepath.Join(got, OptimRankFile(r)))
		if err != nil || string(a) != string(b) {
			t.Fatalf("rank %d's shard file in the copy: %v", r, err)
		}
	}
	files[OptimRankFile(1)] = append([]byte(nil), files[OptimRankFile(1)][:10]...)
	if _, err := writeCheckpointFiles(t.TempDir(), 20, files); err == nil || !strings.Contains(err.Error(), OptimRankFile(1)) {
		t.Fatalf("a truncated shard file was written: %v", err)
	}
	delete(files, OptimRankFile(1))
	if _, err := writeCheckpointFiles(t.TempDir(), 20, files); err == nil || !strings.Contains(err.Error(), OptimRankFile(1)) {
		t.Fatalf("a copy without a shard file was written: %v", err)
	}
}

// A manifest whose layout does not cover the slab once, or whose format and shards record
// disagree, is refused naming the manifest.
func TestSharded_badManifest(t *testing.T) {
	p := saveSharded(t, t.TempDir(), 20)
	b, _ := os.ReadFile(filepath.Join(p, FileManifest))
	for _, c := range []struct{ from, to, want string }{
		{`"format_version": 2`, `"format_version": 1`, "format version 1 with shards record true"},
		{`"format_version": 2`, `"format_version": 3`, "format version 3, this build reads 1 and 2"},
		{`"n": 10`, `"n": 11`, "end at element 10, the slab has 11"},
		{`"world_size": 2`, `"world_size": 3`, "world size 3 with 2 ranks' ranges"},
	} {
		bad := strings.Replace(string(b), c.from, c.to, 1)
		if bad == string(b) {
			t.Fatalf("%q not in the manifest %s", c.from, b)
		}
		if err := os.WriteFile(filepath.Join(p, FileManifest), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), FileManifest) {
			t.Errorf("%s → %s: %v", c.from, c.to, err)
		}
	}
	overlap := testLayout
	overlap.Ranks = [][][2]int{{{0, 4}, {6, 8}}, {{3, 6}, {8, 10}}}
	if err := overlap.check(); err == nil || !strings.Contains(err.Error(), "gap or overlap at element 4") {
		t.Errorf("overlapping ranges: %v", err)
	}
}

// ShardFileFor names the file that holds exactly a rank's ranges (a resume reading it alone), and
// -1 where ranges are cut anew: another world, the same world with other buckets, unsharded.
func TestSharded_shardFileFor(t *testing.T) {
	c, err := Load(saveSharded(t, t.TempDir(), 30))
	if err != nil {
		t.Fatal(err)
	}
	for r, rs := range testLayout.Ranks {
		if got := c.ShardFileFor(rs); got != r {
			t.Errorf("rank %d's own ranges: file of rank %d", r, got)
		}
	}
	for _, rs := range [][][2]int{{{0, 5}}, {{0, 3}}, {{0, 3}, {6, 8}, {9, 10}}, {{0, 10}}} {
		if got := c.ShardFileFor(rs); got != -1 {
			t.Errorf("ranges %v: file of rank %d, want none", rs, got)
		}
	}
	if c.ShardBucketCapMB() != 0.25 {
		t.Errorf("bucket cap %g", c.ShardBucketCapMB())
	}
	un := &Checkpoint{}
	if un.ShardFileFor([][2]int{{0, 3}}) != -1 || un.ShardBucketCapMB() != 0 {
		t.Error("an unsharded checkpoint names a shard file")
	}
}
