package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/observe"
)

// ddp.shard_optimizer through the real binaries: sharded runs end with the param_sha256 of the
// unsharded ones (the pins' for world 2), on 2 and 4 workers, fp32 and fp16, with clipping that
// bites and with an fp16 step skipped, AdamW and SGD with momentum; a sharded job restarted by ddplaunch resumes exactly; a
// sharded checkpoint resumes at another world size.

// launchN runs ddptrain on nproc workers with the pins' short MNIST job and extra --set
// values, and returns every rank's summary.
func launchN(t *testing.T, nproc int, env []string, sets ...string) []observe.SummaryMetrics {
	t.Helper()
	m := filepath.Join(t.TempDir(), "m.jsonl")
	args := []string{"--nproc-per-node", fmt.Sprint(nproc), "--grace", "3s", filepath.Join(binaries(t), "ddptrain"),
		"--config", "../../configs/mnist-mlp.yaml", "--set", "train.max_steps=30", "--set", "train.log_every=10",
		"--set", "train.eval_batches=5", "--set", "data.path=" + mnistDir(t), "--metrics", m}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ddplaunch %v: %v\n%s", sets, err, out)
	}
	var out []observe.SummaryMetrics
	for r := 0; r < nproc; r++ {
		out = append(out, summary(t, observe.RankPath(m, r)))
	}
	return out
}

// launchGPT is launchN on the tiny byte-level GPT of configs/opticks-gpt-tiny.yaml (its text,
// the Go toolchain's Opticks, by default), 12 steps.
func launchGPT(t *testing.T, nproc int, sets ...string) []observe.SummaryMetrics {
	t.Helper()
	m := filepath.Join(t.TempDir(), "m.jsonl")
	args := []string{"--nproc-per-node", fmt.Sprint(nproc), "--grace", "3s", filepath.Join(binaries(t), "ddptrain"),
		"--config", "../../configs/opticks-gpt-tiny.yaml", "--set", "train.max_steps=12", "--set", "train.log_every=6",
		"--set", "train.eval_batches=2", "--set", "train.micro_batch=8", "--metrics", m}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	if out, err := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...).CombinedOutput(); err != nil {
		t.Fatalf("ddplaunch %v: %v\n%s", sets, err, out)
	}
	var out []observe.SummaryMetrics
	for r := 0; r < nproc; r++ {
		out = append(out, summary(t, observe.RankPath(m, r)))
	}
	return out
}

// The GPT, sharded, ends where it does unsharded. Under fp16 its LayerNorms read the f32 master
// gains and biases (model.Param.MasterRead), which the 16-bit all-gather alone left stale on the
// ranks that do not own them (the MNIST MLP above has no such parameter). With
// ddp.overlap_gather on, forward waits for each bucket of the gather itself, and the norms'
// masters (fp16: gathered before it; fp32: part of it) too; off, the gather finishes first.
func TestLaunch_shardedGPTEqualsUnsharded(t *testing.T) {
	if testing.Short() {
		t.Skip("trains eight short GPT jobs")
	}
	fp16 := []string{"precision=fp16", "ddp.wire=f16", "ddp.bucket_cap_mb=0.3"}
	fp32 := []string{"ddp.bucket_cap_mb=0.3"}
	cases := []struct {
		name string
		w    int
		sets []string
		more string // beyond ddp.shard_optimizer=true
	}{
		{"fp16-w2", 2, fp16, "ddp.overlap_gather=off"},
		{"fp16-w2-overlap", 2, fp16, "ddp.overlap_gather=on"},
		{"fp16-w3-overlap", 3, fp16, "ddp.overlap_gather=on"},
		{"fp32-w2-overlap", 2, fp32, "ddp.overlap_gather=on"},
	}
	plains := map[string][]observe.SummaryMetrics{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprint(c.w, c.sets)
			plain := plains[key]
			if plain == nil {
				plain = launchGPT(t, c.w, c.sets...)
				plains[key] = plain
			}
			sets := append(append([]string{}, c.sets...), "ddp.shard_optimizer=true", c.more)
			sharded := launchGPT(t, c.w, sets...)
			for r := range sharded {
				// final_loss is the rank's own micro-batches' loss: compared rank by rank
				if sharded[r].ParamSHA256 != plain[0].ParamSHA256 || sharded[r].FinalLoss != plain[r].FinalLoss {
					t.Fatalf("rank %d: sharded param_sha256 %s final loss %v, unsharded %s %v",
						r, sharded[r].ParamSHA256, sharded[r].FinalLoss, plain[0].ParamSHA256, plain[r].FinalLoss)
				}
			}
		})
	}
}

func TestLaunch_shardedEqualsUnsharded(t *testing.T) {
	if testing.Short() {
		t.Skip("trains sixteen short jobs")
	}
	cases := []struct {
		name  string
		world int
		env   []string
		sets  []string
		pin   string // the unsharded pin (pins_test.go), where there is one
	}{
		{"fp32-w2", 2, nil, nil, "5f69e6ad6ea732a7590e116c1ba617902766af96f7c4c8cd3242c713db00c5e8"},
		{"fp16-w2-f16wire", 2, nil, []string{"precision=fp16", "ddp.wire=f16"}, "e48f609909ddf6d62a78e2a043dee763f782115c269ca583873b1e05c72a4417"},
		{"fp32-w4-buckets", 4, nil, []string{"ddp.bucket_cap_mb=0.3", "ddp.channels=2"}, ""},
		{"fp16-w4-f16wire", 4, nil, []string{"precision=fp16", "ddp.wire=f16"}, ""},
		{"fp32-w2-clip", 2, nil, []string{"train.grad_clip=0.05", "ddp.bucket_cap_mb=0.3"}, ""},
		{"fp16-w2-skip", 2, []string{"DDP_INJECT_INF_STEP=3", "DDP_INJECT_INF_RANK=1"}, []string{"precision=fp16", "ddp.wire=f16"}, ""},
		{"sgd-fp32-w2", 2, nil, []string{"train.optimizer=sgd", "train.momentum=0.9", "train.grad_clip=0.05"}, ""},
		{"sgd-fp16-w4-nesterov", 4, nil, []string{"train.optimizer=sgd", "train.momentum=0.9", "train.nesterov=true", "precision=fp16", "ddp.wire=f16"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plain := launchN(t, c.world, c.env, c.sets...)
			sharded := launchN(t, c.world, c.env, append(c.sets, "ddp.shard_optimizer=true")...)
			for r := range sharded {
				if sharded[r].ParamSHA256 != plain[0].ParamSHA256 || plain[r].ParamSHA256 != plain[0].ParamSHA256 {
					t.Fatalf("rank %d: sharded %s, unsharded %s (rank 0 unsharded %s)", r, sharded[r].ParamSHA256, plain[r].ParamSHA256, plain[0].ParamSHA256)
				}
				if sharded[r].SkippedSteps != plain[r].SkippedSteps {
					t.Fatalf("rank %d: %d steps skipped sharded, %d unsharded", r, sharded[r].SkippedSteps, plain[r].SkippedSteps)
				}
			}
			if c.pin != "" && plain[0].ParamSHA256 != c.pin {
				t.Fatalf("unsharded %s, pinned %s", plain[0].ParamSHA256, c.pin)
			}
			if strings.HasSuffix(c.name, "skip") && sharded[0].SkippedSteps != 1 {
				t.Fatalf("%d steps skipped, want 1", sharded[0].SkippedSteps)
			}
		})
	}
}

// A sharded job whose workers all fail at step 25, or whose rank 1 alone is SIGKILLed there, is
// restarted by ddplaunch (--max-restarts 1), resumes from its newest checkpoint (a shard file per
// rank, each rank reading its own back) and ends where the uninterrupted job
// does — and where the unsharded job does.
func TestLaunch_shardedMaxRestartsResumesExactly(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, env []string, extra ...string) []string {
		m := filepath.Join(dir, name+".jsonl")
		cmd := launch(t, filepath.Join(dir, "ck-"+name), m, extra...)
		cmd.Args = append(cmd.Args, "--set", "ddp.shard_optimizer=true", "--set", "ddp.bucket_cap_mb=0.02")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if len(env) > 0 && !strings.Contains(string(out), "resumed from checkpoint") {
			t.Fatalf("%s: the restart did not resume from a checkpoint:\n%s", name, out)
		}
		return []string{summary(t, m).ParamSHA256, summary(t, observe.RankPath(m, 1)).ParamSHA256}
	}
	straight := run("straight", nil)
	shardedCheckpoint(t, filepath.Join(dir, "ck-straight", "step-00000040"), 2)
	restarted := run("restarted", []string{"DDP_FAIL_AT_STEP=25"}, "--max-restarts", "1")
	if straight[0] != straight[1] || restarted[0] != restarted[1] || straight[0] != restarted[0] {
		t.Fatalf("uninterrupted %v, restarted %v (rank 0, rank 1)", straight, restarted)
	}
	// Rank 1 alone SIGKILLed before step 25: rank 0 is left in a collective, ddplaunch stops
	// it and starts both again, and they resume to the same hash.
	killed := run("killed", []string{"DDP_KILL_AT_STEP=25", "DDP_KILL_RANK=1"}, "--max-restarts", "1")
	if killed[0] != killed[1] || killed[0] != straight[0] {
		t.Fatalf("uninterrupted %v, rank 1 killed and restarted %v (rank 0, rank 1)", straight, killed)
	}
	m := filepath.Join(dir, "plain.jsonl")
	cmd := launch(t, filepath.Join(dir, "ck-plain"), m)
	cmd.Args = append(cmd.Args, "--set", "ddp.bucket_cap_mb=0.02")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unsharded: %v\n%s", err, out)
	}
	if h := summary(t, m).ParamSHA256; h != straight[0] {
		t.Fatalf("sharded job ends with %s, unsharded %s", straight[0], h)
	}
}

// A sharded checkpoint (a shard file per rank) resumes at another world size, each rank reading the
// ranges it now owns from the files that hold them: on one worker (unsharded, fp32: world 1 with accumulation ends where world 2 does) exactly
// where the sharded two-worker job ends; on four workers re-sharded, exactly where four
// unsharded workers resuming the same checkpoint end.
func TestTrain_shardedCheckpointResumesAtAnotherWorldSize(t *testing.T) {
	dir := t.TempDir()
	fp32 := []string{"--set", "precision=fp32", "--set", "ddp.shard_optimizer=true"}
	m := filepath.Join(dir, "straight.jsonl")
	cmd := launch(t, filepath.Join(dir, "ck-a"), m)
	cmd.Args = append(cmd.Args, fp32...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("straight: %v\n%s", err, out)
	}
	want := summary(t, m).ParamSHA256
	from := filepath.Join(dir, "ck-a", "step-00000040")
	shardedCheckpoint(t, from, 2)

	// A corrupt shard file is named by the resume that needs it: world 1 reads every shard.
	bad := filepath.Join(dir, "bad", "step-00000040")
	if err := os.CopyFS(bad, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(bad, checkpoint.OptimRankFile(1))
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runTrain(t, nil, append(append(smallRun(t, filepath.Join(dir, "ck-bad")), fp32...), "--set", "train.micro_batch=64",
		"--resume-from", bad)...)
	if err == nil || !strings.Contains(out, checkpoint.OptimRankFile(1)) || !strings.Contains(out, "corrupted") {
		t.Fatalf("world 1 from a checkpoint with a corrupt shard file: %v\n%s", err, out)
	}

	one := filepath.Join(dir, "one.jsonl")
	out, err = runTrain(t, nil, append(append(smallRun(t, filepath.Join(dir, "ck-1")), fp32...), "--set", "train.micro_batch=64",
		"--resume-from", from, "--metrics", one)...)
	if err != nil || !strings.Contains(out, "resumed from checkpoint") {
		t.Fatalf("world 1 from %s: %v\n%s", from, err, out)
	}
	if h := summary(t, one).ParamSHA256; h != want {
		t.Fatalf("world 1 resumed from the sharded world-2 checkpoint ends with %s, world 2 with %s", h, want)
	}

	// global_batch 256 (micro-batch 64: accumulation 2 on two workers, 1 on four) for the
	// four-worker resumes, from a sharded two-worker checkpoint of its own.
	g256 := append(fp32, "--set", "train.global_batch=256")
	cmd = launch(t, filepath.Join(dir, "ck-b"), filepath.Join(dir, "b.jsonl"))
	cmd.Args = append(cmd.Args, g256...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("global batch 256: %v\n%s", err, out)
	}
	from = filepath.Join(dir, "ck-b", "step-00000040")
	four := func(name string, shard string) string {
		return resumeWorld4(t, dir, from, name, shard, "--set", "precision=fp32")
	}
	if a, b := four("four-sharded", "true"), four("four-plain", "false"); a != b {
		t.Fatalf("world 4 resumed sharded ends with %s, unsharded %s", a, b)
	}
}

// shardedCheckpoint fails unless step is a sharded checkpoint of world ranks: a format-2 manifest
// with a shards record of that world, listing optim-rank-NNNNN.safetensors of every rank (each
// present), and no optim.safetensors.
func shardedCheckpoint(t *testing.T, step string, world int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(step, checkpoint.FileManifest))
	if err != nil {
		t.Fatal(err)
	}
	var m checkpoint.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Format != checkpoint.FormatSharded || m.Shards == nil || m.Shards.WorldSize != world || len(m.Shards.Ranks) != world {
		t.Fatalf("%s: not a sharded checkpoint of world %d: %s", step, world, b)
	}
	for r := range world {
		f := checkpoint.OptimRankFile(r)
		if _, ok := m.Files[f]; !ok {
			t.Fatalf("%s: the manifest does not list %s", step, f)
		}
		if _, err := os.Stat(filepath.Join(step, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(step, checkpoint.FileOptim)); err == nil {
		t.Fatalf("%s: a sharded checkpoint with %s", step, checkpoint.FileOptim)
	}
}

// Hosts without a shared filesystem, sharded: each host's local rank 0 writes every rank's shard
// file into its own checkpoint.dir; host 0 loses its disk between the failure and the restart, the
// restarted job copies step 20 with its shard files from host 1, and each rank resumes from its own
// shard to the hash of the uninterrupted sharded job.
func TestTrain_shardedPerHostRestart(t *testing.T) {
	dir := t.TempDir()
	sharded := "ddp.shard_optimizer=true"
	straight := filepath.Join(dir, "straight.jsonl")
	if outs, errs := twoHosts(t, filepath.Join(dir, "a"), straight, nil, sharded); errs[0] != nil || errs[1] != nil {
		t.Fatalf("uninterrupted job: %v %v\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	base := filepath.Join(dir, "b")
	outs, errs := twoHosts(t, base, filepath.Join(dir, "broken.jsonl"), []string{"DDP_FAIL_AT_STEP=25"}, sharded)
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("both ranks should fail at step 25: %v %v\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	for r := range 2 {
		shardedCheckpoint(t, fmt.Sprintf("%s-%d/step-00000020", base, r), 2)
	}
	if err := os.RemoveAll(base + "-0"); err != nil { // host 0's disk is gone
		t.Fatal(err)
	}
	resumed := filepath.Join(dir, "resumed.jsonl")
	outs, errs = twoHosts(t, base, resumed, []string{"DDP_RESTART_COUNT=1"}, sharded)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("restarted job: %v %v\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	if !strings.Contains(outs[0], "received and verified") || !strings.Contains(outs[0], "resumed from checkpoint") {
		t.Fatalf("rank 0 did not receive step 20 from rank 1 and resume:\n%s", outs[0])
	}
	if latest, err := checkpoint.Latest(base + "-0"); err != nil || latest == "" {
		t.Fatalf("host 0 after the restart: %q, %v", latest, err)
	} else {
		shardedCheckpoint(t, latest, 2)
	}
	for r := range 2 {
		a, b := summary(t, observe.RankPath(straight, r)), summary(t, observe.RankPath(resumed, r))
		if a.ParamSHA256 != b.ParamSHA256 {
			t.Fatalf("rank %d: restarted job ends with %s, uninterrupted %s", r, b.ParamSHA256, a.ParamSHA256)
		}
	}
}

// ddp.shard_master (on by default on the CPU under fp16 with ddp.shard_optimizer): each rank keeps
// the f32 master of its shard only (the memory report says so), and its checkpoints are today's —
// the weights (gathered on the host) and every rank's optimizer shard file the same bits as with
// the master whole; a resume at the same world size ends where the uninterrupted job does, and one
// at another world size (four workers, the master sharded anew) where four unsharded workers
// resuming the same checkpoint do.
func TestTrain_shardedMasterCheckpointResumes(t *testing.T) {
	dir := t.TempDir()
	sets := []string{"--set", "ddp.shard_optimizer=true", "--set", "train.global_batch=256"} // fp16: smallRun's
	run := func(name string, more ...string) (hash, out string) {
		m := filepath.Join(dir, name+".jsonl")
		cmd := launch(t, filepath.Join(dir, "ck-"+name), m)
		cmd.Args = append(append(cmd.Args, sets...), more...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		return summary(t, m).ParamSHA256, string(b)
	}
	hashOn, out := run("on", "--memory-report")
	if !strings.Contains(out, "master weights (rank's shard)") {
		t.Fatalf("the memory report of the default run does not name the master's shard:\n%s", out)
	}
	hashOff, out := run("off", "--set", "ddp.shard_master=off", "--memory-report")
	if strings.Contains(out, "master weights (rank's shard)") {
		t.Fatalf("ddp.shard_master=off: the memory report names a master shard:\n%s", out)
	}
	if hashOn != hashOff {
		t.Fatalf("param_sha256 with the master sharded %s, whole %s", hashOn, hashOff)
	}
	from := filepath.Join(dir, "ck-on", "step-00000040")
	shardedCheckpoint(t, from, 2)
	for _, f := range []string{model.WeightsFile, checkpoint.OptimRankFile(0), checkpoint.OptimRankFile(1)} {
		a, b := readTensors(t, filepath.Join(from, f)), readTensors(t, filepath.Join(dir, "ck-off", "step-00000040", f))
		if len(a) == 0 || fmt.Sprint(names(a)) != fmt.Sprint(names(b)) {
			t.Fatalf("%s: tensors %v with the master sharded, %v whole", f, names(a), names(b))
		}
		for i := range a {
			if !bytes.Equal(a[i].Data, b[i].Data) {
				t.Fatalf("%s: tensor %s differs between the runs with the master sharded and whole", f, a[i].Name)
			}
		}
	}
	if h, _ := run("resumed", "--resume-from", from); h != hashOn {
		t.Fatalf("resumed at world 2 from step 40 ends with %s, the uninterrupted job with %s", h, hashOn)
	}
	four := func(name string, shard string) string {
		return resumeWorld4(t, dir, from, name, shard)
	}
	if a, b := four("four-sharded", "true"), four("four-plain", "false"); a != b {
		t.Fatalf("world 4 resumed with the master sharded ends with %s, unsharded %s", a, b)
	}
}

// readTensors is a safetensors file's tensors, in the file's order.
func readTensors(t *testing.T, path string) []model.NamedTensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := model.ParseSafetensors(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ts
}

func names(ts []model.NamedTensor) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.Name)
	}
	return out
}

// resumeWorld4 resumes the checkpoint from at world 4 (ddp.shard_optimizer=shard, the extra
// settings after smallRun's) and returns the param_sha256 every rank ends with (a rank that
// differs fails the test).
func resumeWorld4(t *testing.T, dir, from, name, shard string, extra ...string) string {
	t.Helper()
	m := filepath.Join(dir, name+".jsonl")
	args := []string{"--nproc-per-node", "4", "--grace", "3s", filepath.Join(binaries(t), "ddptrain")}
	args = append(args, smallRun(t, filepath.Join(dir, "ck-"+name))...)
	args = append(args, extra...)
	args = append(args, "--set", "train.global_batch=256", "--set", "ddp.shard_optimizer="+shard, "--resume-from", from, "--metrics", m)
	out, err := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "resumed from checkpoint") {
		t.Fatalf("world 4 (%s) from %s: %v\n%s", name, from, err, out)
	}
	h := summary(t, m).ParamSHA256
	for r := 1; r < 4; r++ {
		if hr := summary(t, observe.RankPath(m, r)).ParamSHA256; hr != h {
			t.Fatalf("world 4 (%s): rank %d ends with %s, rank 0 %s", name, r, hr, h)
		}
	}
	return h
}
