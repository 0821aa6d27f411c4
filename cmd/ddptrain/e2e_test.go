package main

// End-to-end tests of the trainer as users run it: the real binaries, real MNIST (from the Go
// module cache; `go mod download` fetches it), real processes. They cover issue 4's "done when":
// a resumed run ends bit-identical to an uninterrupted one, a SIGKILLed worker makes ddplaunch
// exit non-zero naming the rank with no process left, and --max-restarts 1 finishes with the
// uninterrupted run's param_sha256.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/data"
	"github.com/goddp/goddp/worker/observe"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds ddptrain and ddplaunch once per test process.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "goddp-e2e-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-tags", "ddptesthooks", "-o", binDir+"/", "github.com/goddp/goddp/cmd/ddptrain", "github.com/goddp/goddp/cmd/ddplaunch", "github.com/goddp/goddp/cmd/ddpbench")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func mnistDir(t *testing.T) string {
	t.Helper()
	dir, err := data.DefaultPath("mnist")
	if err != nil {
		t.Skipf("MNIST is not in the module cache (run `go mod download`): %v", err)
	}
	return dir
}

// smallRun is a short MNIST job: a small MLP, 48 steps, checkpoints every 10.
func smallRun(t *testing.T, ckdir string) []string {
	return []string{"--config", "../../configs/mnist-mlp.yaml",
		"--set", "model.widths=[784,32,10]", "--set", "train.max_steps=48", "--set", "train.micro_batch=64",
		"--set", "train.log_every=8", "--set", "train.eval_batches=10", "--set", "data.path=" + mnistDir(t),
		"--set", "checkpoint.dir=" + ckdir, "--set", "checkpoint.every=10", "--set", "precision=fp16"}
}

func summary(t *testing.T, metrics string) observe.SummaryMetrics {
	t.Helper()
	m, err := observe.ReadMetrics(metrics)
	if err != nil {
		t.Fatal(err)
	}
	if m.Summary == nil {
		t.Fatalf("%s has no summary line", metrics)
	}
	return *m.Summary
}

func runTrain(t *testing.T, env []string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(binaries(t), "ddptrain"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTrain_resumeIsExact(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.jsonl")
	if out, err := runTrain(t, nil, append(smallRun(t, filepath.Join(dir, "ck-a")), "--metrics", straight)...); err != nil {
		t.Fatalf("straight run: %v\n%s", err, out)
	}
	// The end of training is an evaluation (issue 29, item 4): its eval line is the summary's,
	// and ddpbench plot draws it.
	if m, err := observe.ReadMetrics(straight); err != nil || len(m.Evals) == 0 || m.Evals[len(m.Evals)-1].Step != 48 ||
		m.Summary == nil || m.Evals[len(m.Evals)-1].EvalLoss != m.Summary.EvalLoss {
		t.Fatalf("the straight run's metrics end without the last evaluation at step 48 (%v)", err)
	}
	png := filepath.Join(dir, "curves.png")
	if b, err := exec.Command(filepath.Join(binaries(t), "ddpbench"), "plot", straight, "-o", png).CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "1 evaluations") {
		t.Fatalf("ddpbench plot of the straight run: %v\n%s", err, b)
	}
	// The same job, killed at step 25 (after the checkpoint of step 20), then started again.
	ck := filepath.Join(dir, "ck-b")
	broken := filepath.Join(dir, "broken.jsonl")
	out, err := runTrain(t, []string{"DDP_FAIL_AT_STEP=25"}, append(smallRun(t, ck), "--metrics", broken)...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the failing run should exit 3, got %v\n%s", err, out)
	}
	resumed := filepath.Join(dir, "resumed.jsonl")
	out, err = runTrain(t, []string{"DDP_RESTART_COUNT=1"}, append(smallRun(t, ck), "--metrics", resumed)...)
	if err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "resumed from checkpoint") {
		t.Fatalf("the second run did not resume:\n%s", out)
	}
	// What happens before the first log step is said (issue 29, item 6): the setup, then the
	// first step (the resumed one), then the steps.
	setup, first, train := strings.Index(out, "setting up:"), strings.Index(out, "training: the first step"), strings.Index(out, "msg=train ")
	if setup < 0 || first < setup || train < first || !strings.Contains(out[first:], "step=20 of=48 first_log_at_step=24") {
		t.Fatalf("the resumed run does not say what it does before its first log step:\n%s", out)
	}
	a, b := summary(t, straight), summary(t, resumed)
	if a.ParamSHA256 != b.ParamSHA256 || a.Steps != b.Steps {
		t.Fatalf("resumed run ends with %s after %d steps, uninterrupted %s after %d", b.ParamSHA256, b.Steps, a.ParamSHA256, a.Steps)
	}
	// Started again, the finished run says so, with its summary, and exits 0.
	out, err = runTrain(t, nil, smallRun(t, ck)...)
	if err != nil || !strings.Contains(out, "run already finished at step 48: nothing to do") || !strings.Contains(out, a.ParamSHA256) {
		t.Fatalf("the finished run started again: %v\n%s", err, out)
	}
	// --resume-from the straight run's step 40, into a checkpoint.dir of its own: the same end.
	from := filepath.Join(dir, "ck-a", "step-00000040")
	again := filepath.Join(dir, "again.jsonl")
	out, err = runTrain(t, nil, append(smallRun(t, filepath.Join(dir, "ck-c")), "--resume-from", from, "--metrics", again)...)
	if err != nil || !strings.Contains(out, "resumed from checkpoint") {
		t.Fatalf("--resume-from %s: %v\n%s", from, err, out)
	}
	if c := summary(t, again); c.ParamSHA256 != a.ParamSHA256 {
		t.Fatalf("the run from --resume-from step 40 ends with %s, uninterrupted %s", c.ParamSHA256, a.ParamSHA256)
	}
	// Going back to step 40 of the same run, in its own checkpoint.dir (issue 29, item 3): not
	// "another run"; the newer checkpoints are set aside, and the run ends as the straight one.
	back := filepath.Join(dir, "back.jsonl")
	out, err = runTrain(t, nil, append(smallRun(t, filepath.Join(dir, "ck-a")), "--resume-from", filepath.Join(dir, "ck-a", "step-00000040"), "--metrics", back)...)
	if err != nil || !strings.Contains(out, "resumed from checkpoint") {
		t.Fatalf("--resume-from an earlier step of the same run: %v\n%s", err, out)
	}
	if c := summary(t, back); c.ParamSHA256 != a.ParamSHA256 {
		t.Fatalf("the run gone back to step 40 ends with %s, uninterrupted %s", c.ParamSHA256, a.ParamSHA256)
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "ck-a", "abandoned-*-step-00000048")); len(aside) != 1 {
		t.Fatalf("the abandoned step 48 was not set aside: %v", aside)
	}
}

func TestTrain_refusesBadCheckpointAndConfig(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if out, err := runTrain(t, []string{"DDP_FAIL_AT_STEP=12"}, smallRun(t, ck)...); err == nil {
		t.Fatalf("expected the planted failure\n%s", out)
	}
	// Corrupt the only checkpoint's weights: the next run must refuse it and say which file.
	matches, _ := filepath.Glob(filepath.Join(ck, "step-*", "model.safetensors"))
	if len(matches) != 1 {
		t.Fatalf("want one checkpoint, found %v", matches)
	}
	b, _ := os.ReadFile(matches[0])
	b[len(b)/2] ^= 0x40
	os.WriteFile(matches[0], b, 0o644)
	// It is the only checkpoint: the run fails (exit 1) rather than start from random weights.
	out, err := runTrain(t, []string{"DDP_RESTART_COUNT=1"}, smallRun(t, ck)...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.Contains(out, "resumed from checkpoint") {
		t.Fatalf("a run whose every checkpoint is corrupted should exit 1, got %v:\n%s", err, out)
	}
	if !strings.Contains(out, matches[0]) || !strings.Contains(out, "every checkpoint is broken") {
		t.Fatalf("the refusal does not name the corrupted file:\n%s", out)
	}
	// checkpoint.fresh_if_broken: the user's explicit choice to start over.
	if out, err := runTrain(t, nil, append(smallRun(t, ck), "--set", "checkpoint.fresh_if_broken=true", "--set", "train.max_steps=2")...); err != nil {
		t.Fatalf("fresh_if_broken: %v\n%s", err, out)
	}
	// A typo in a key is an error naming the key.
	out, err = runTrain(t, nil, "--config", "../../configs/mnist-mlp.yaml", "--set", "train.lr_rate=1")
	if err == nil || !strings.Contains(out, "lr_rate") {
		t.Fatalf("unknown key not named: %v\n%s", err, out)
	}
}

// launch starts ddplaunch with 2 workers on the small job.
func launch(t *testing.T, ckdir, metrics string, extra ...string) *exec.Cmd {
	args := append([]string{"--nproc-per-node", "2", "--grace", "3s"}, extra...)
	args = append(args, filepath.Join(binaries(t), "ddptrain"))
	args = append(args, smallRun(t, ckdir)...)
	args = append(args, "--metrics", metrics)
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	cmd.Env = os.Environ()
	return cmd
}

func TestLaunch_killedWorkerStopsTheJob(t *testing.T) {
	dir := t.TempDir()
	cmd := launch(t, filepath.Join(dir, "ck"), filepath.Join(dir, "m.jsonl"))
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for rank 1 to be training, then SIGKILL it.
	sc := bufio.NewScanner(stderr)
	var lines []string
	var victim int
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "[rank 0]") && strings.Contains(sc.Text(), "msg=train") {
			victim = workerPID(t, cmd.Process.Pid, "1")
			break
		}
	}
	if victim == 0 {
		cmd.Process.Kill()
		t.Fatalf("never saw training start:\n%s", strings.Join(lines, "\n"))
	}
	workers := childPIDs(cmd.Process.Pid)
	syscall.Kill(victim, syscall.SIGKILL)
	killed := time.Now()
	// Read stderr to its end before Wait (Wait closes the pipe: lines still in it would be lost,
	// the failure report among them — a CI run saw that with a 100 ms sleep in place of this).
	read := make(chan struct{})
	go func() {
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-read
		t.Fatalf("ddplaunch's stderr still open 15 s after the kill:\n%s", strings.Join(lines, "\n"))
	}
	err := cmd.Wait()
	took := time.Since(killed)
	if err == nil {
		t.Fatal("ddplaunch exited 0 after a worker was killed")
	}
	if took > 15*time.Second {
		t.Fatalf("ddplaunch took %v to exit after the kill (bound 15 s)", took)
	}
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, "rank 1") {
		t.Fatalf("the failure report does not name rank 1:\n%s", all)
	}
	for _, pid := range workers {
		if alive(pid) {
			t.Errorf("worker pid %d outlived ddplaunch", pid)
		}
	}
}

func TestLaunch_maxRestartsResumesExactly(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.jsonl")
	if out, err := launch(t, filepath.Join(dir, "ck-a"), straight).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted job: %v\n%s", err, out)
	}
	restarted := filepath.Join(dir, "restarted.jsonl")
	cmd := launch(t, filepath.Join(dir, "ck-b"), restarted, "--max-restarts", "1")
	cmd.Env = append(cmd.Env, "DDP_FAIL_AT_STEP=25") // every worker exits 3 at step 25 on the first attempt
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("job with a restart: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "resumed from checkpoint") {
		t.Fatalf("the restart did not resume from a checkpoint:\n%s", out)
	}
	for r := 0; r < 2; r++ {
		a := summary(t, observe.RankPath(straight, r))
		b := summary(t, observe.RankPath(restarted, r))
		if a.ParamSHA256 != b.ParamSHA256 {
			t.Fatalf("rank %d: restarted job ends with %s, uninterrupted %s", r, b.ParamSHA256, a.ParamSHA256)
		}
	}
	if a, b := summary(t, straight), summary(t, observe.RankPath(straight, 1)); a.ParamSHA256 != b.ParamSHA256 {
		t.Fatalf("ranks disagree: %s vs %s", a.ParamSHA256, b.ParamSHA256)
	}
}

// childPIDs lists the direct children of pid (from /proc).
func childPIDs(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// workerPID finds the child of the launcher whose environment has RANK=rank.
func workerPID(t *testing.T, launcher int, rank string) int {
	for _, pid := range childPIDs(launcher) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == "RANK="+rank {
				return pid
			}
		}
	}
	return 0
}

// alive is true while pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	return len(f) > 0 && f[0] != "Z"
}

// twoHosts runs a 2-rank job by hand, each rank as if on its own host (NODE_RANK r, LOCAL_RANK 0),
// with checkpoint.dir = base-{node}: two "disks", and sets as more --set values. It returns each
// rank's output and error.
func twoHosts(t *testing.T, base, metrics string, env []string, sets ...string) ([2]string, [2]error) {
	port := freePort(t)
	var outs [2]string
	var errs [2]error
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		args := append(smallRun(t, base+"-{node}"), "--set", "checkpoint.per_host=true", "--metrics", metrics)
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		cmd := exec.Command(filepath.Join(binaries(t), "ddptrain"), args...)
		cmd.Env = append(os.Environ(), append([]string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=0",
			"LOCAL_WORLD_SIZE=1", "NODE_RANK=" + strconv.Itoa(r), "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT=" + strconv.Itoa(port), "DDP_TOKEN=e2e"}, env...)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
		}()
	}
	wg.Wait()
	return outs, errs
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Hosts without a shared filesystem: host 0 loses its disk between the failure and the restart;
// the restarted job takes the newest checkpoint host 1 has, and ends bit-identical to a run that
// was never interrupted.
func TestTrain_restartTakesTheNewestCheckpointAnyHostHas(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.jsonl")
	if outs, errs := twoHosts(t, filepath.Join(dir, "a"), straight, nil); errs[0] != nil || errs[1] != nil {
		t.Fatalf("uninterrupted job: %v %v\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	base := filepath.Join(dir, "b")
	outs, errs := twoHosts(t, base, filepath.Join(dir, "broken.jsonl"), []string{"DDP_FAIL_AT_STEP=25"})
	// Each rank exits 3 at step 25 unless its peer went first, which breaks its ring: non-zero.
	for r, err := range errs {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
			t.Fatalf("rank %d should fail at step 25, got %v\n%s", r, err, outs[r])
		}
	}
	for r := 0; r < 2; r++ {
		if m, _ := filepath.Glob(fmt.Sprintf("%s-%d/step-00000020/MANIFEST.json", base, r)); len(m) != 1 {
			t.Fatalf("host %d did not write its own copy of step 20", r)
		}
	}
	if err := os.RemoveAll(base + "-0"); err != nil { // host 0's disk is gone
		t.Fatal(err)
	}
	resumed := filepath.Join(dir, "resumed.jsonl")
	outs, errs = twoHosts(t, base, resumed, []string{"DDP_RESTART_COUNT=1"})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("restarted job: %v %v\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	if !strings.Contains(outs[0], "received and verified") || !strings.Contains(outs[0], "resumed from checkpoint") {
		t.Fatalf("rank 0 did not receive step 20 from rank 1 and resume:\n%s", outs[0])
	}
	for r := 0; r < 2; r++ {
		a, b := summary(t, observe.RankPath(straight, r)), summary(t, observe.RankPath(resumed, r))
		if a.ParamSHA256 != b.ParamSHA256 {
			t.Fatalf("rank %d: restarted job ends with %s, uninterrupted %s", r, b.ParamSHA256, a.ParamSHA256)
		}
	}
}

// The README's path on the Opticks BPE config and a slice of the text, tokenized here (ddpbench
// tokenize's code): it trains on the shards, ddptrain eval scores the checkpoint alone, the run
// goes back to an earlier step of itself and ends the same, its checkpoint exports in Hugging
// Face's layout with the binary, the export opens as a GPT-2 whose logits are the ones goddp
// wrote beside it, and ddptrain sample reads the export.
func TestTrain_tokensThenExportHF(t *testing.T) {
	text, err := data.DefaultPath("text")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	slice := filepath.Join(dir, "opticks-head.txt")
	b, err := os.ReadFile(text)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(slice, b[:60_000], 0o644)
	enc, err := data.NewEncoder("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	shards := filepath.Join(dir, "shards")
	if _, err := data.Tokenize(enc, []string{slice}, data.TokenizeOptions{OutDir: shards, Prefix: "opticks", EvalFraction: 0.1}); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ck")
	m := filepath.Join(dir, "m.jsonl")
	out, err := runTrain(t, nil, "--config", "../../configs/opticks-gpt2-bpe.yaml", "--set", "data.path="+shards,
		"--set", "model.layers=1", "--set", "model.width=32", "--set", "model.heads=2", "--set", "model.context=32",
		"--set", "train.max_steps=4", "--set", "train.micro_batch=4", "--set", "train.eval_batches=2",
		"--set", "checkpoint.dir="+ck, "--set", "checkpoint.every=2", "--metrics", m)
	if err != nil {
		t.Fatalf("training on the shards: %v\n%s", err, out)
	}
	s := summary(t, m)
	if s.Steps != 4 || !(s.EvalLoss > 5 && s.EvalLoss < 12) {
		t.Fatalf("summary %+v", s)
	}
	// Back to step 2 of the same run, in its own checkpoint.dir (issue 29, item 3): the same end.
	m2 := filepath.Join(dir, "m2.jsonl")
	out, err = runTrain(t, nil, "--config", "../../configs/opticks-gpt2-bpe.yaml", "--set", "data.path="+shards,
		"--set", "model.layers=1", "--set", "model.width=32", "--set", "model.heads=2", "--set", "model.context=32",
		"--set", "train.max_steps=4", "--set", "train.micro_batch=4", "--set", "train.eval_batches=2",
		"--set", "checkpoint.dir="+ck, "--set", "checkpoint.every=2", "--metrics", m2, "--resume-from", filepath.Join(ck, "step-00000002"))
	if err != nil {
		t.Fatalf("resuming from step 2 of the same run: %v\n%s", err, out)
	}
	if s2 := summary(t, m2); s2.ParamSHA256 != s.ParamSHA256 {
		t.Fatalf("resumed from step 2: %s, the straight run %s", s2.ParamSHA256, s.ParamSHA256)
	}
	// ddptrain eval on the run's checkpoint alone (issue 29, item 1): the checkpoint knows its
	// data (data.path is not part of the trajectory config, so it is recorded beside it).
	out2, err := exec.Command(filepath.Join(binaries(t), "ddptrain"), "eval", "--checkpoint", ck, "--set", "train.eval_batches=2", "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out2), `"eval_loss"`) {
		t.Fatalf("ddptrain eval --checkpoint %s (no --config): %v\n%s", ck, err, out2)
	}
	hf := filepath.Join(dir, "hf")
	cmd := exec.Command(filepath.Join(binaries(t), "ddptrain"), "export", "--checkpoint", ck, "--format", "hf", "--out", hf, "--check-logits")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, b)
	}
	var ref struct {
		Tokens []int32     `json:"tokens"`
		Logits [][]float32 `json:"logits"`
	}
	js, _ := os.ReadFile(filepath.Join(hf, "goddp_logits.json"))
	if err := json.Unmarshal(js, &ref); err != nil {
		t.Fatal(err)
	}
	gm, spec, err := model.Open(cpu.New(), hf)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Free()
	if spec.Vocab != 50257 || spec.Width != 32 {
		t.Fatalf("the export opens as %+v", spec)
	}
	logits, err := gm.(*model.GPT).Logits(ref.Tokens, 1, len(ref.Tokens))
	if err != nil {
		t.Fatal(err)
	}
	for i := range ref.Tokens {
		for v := 0; v < spec.Vocab; v += 97 {
			if logits[i*spec.Vocab+v] != ref.Logits[i][v] {
				t.Fatalf("logit (%d,%d): %g from the export, %g from goddp", i, v, logits[i*spec.Vocab+v], ref.Logits[i][v])
			}
		}
	}
	// ddptrain sample reads the Hugging Face directory (issue 29, item 9): what a user tries
	// first with a downloaded GPT-2.
	if b, err := exec.Command(filepath.Join(binaries(t), "ddptrain"), "sample", "--checkpoint", hf, "--prompt", "The light",
		"--max-new-tokens", "3", "--temperature", "0", "--json").CombinedOutput(); err != nil || !strings.Contains(string(b), `"completion"`) {
		t.Fatalf("ddptrain sample --checkpoint %s (Hugging Face): %v\n%s", hf, err, b)
	}
	// A bad --format is a usage error, exit 1 after nothing was written.
	if err := exec.Command(filepath.Join(binaries(t), "ddptrain"), "export", "--checkpoint", ck, "--format", "onnx", "--out", hf).Run(); err == nil {
		t.Error("export --format onnx succeeded")
	}
}

// ddp.channels deals the buckets over several process groups (several all-reduces at once): the
// job ends bit-identical to the one-channel job.
func TestLaunch_channelsAreBitIdentical(t *testing.T) {
	dir := t.TempDir()
	var hashes []string
	for _, ch := range []string{"1", "3"} {
		m := filepath.Join(dir, "m"+ch+".jsonl")
		cmd := launch(t, filepath.Join(dir, "ck"+ch), m)
		cmd.Args = append(cmd.Args, "--set", "ddp.channels="+ch, "--set", "ddp.bucket_cap_mb=0.02")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("channels %s: %v\n%s", ch, err, out)
		}
		a, b := summary(t, m), summary(t, observe.RankPath(m, 1))
		if a.ParamSHA256 != b.ParamSHA256 {
			t.Fatalf("channels %s: ranks disagree", ch)
		}
		hashes = append(hashes, a.ParamSHA256)
	}
	if hashes[0] != hashes[1] {
		t.Fatalf("3 channels end with %s, 1 channel with %s", hashes[1], hashes[0])
	}
}

// precision bf16 has no loss scaler: an inf gradient on one rank of two (after the all-reduce)
// stops the job with an error naming the step and the rank, where fp16 skips the step.
func TestLaunch_bf16InfGradientNamesStepAndRank(t *testing.T) {
	run := func(precision string) (string, error) {
		args := []string{"--nproc-per-node", "2", "--grace", "3s", filepath.Join(binaries(t), "ddptrain"),
			"--config", "../../configs/mnist-mlp.yaml", "--set", "model.widths=[784,32,10]", "--set", "train.max_steps=6",
			"--set", "train.eval_batches=2", "--set", "data.path=" + mnistDir(t), "--set", "precision=" + precision}
		cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
		cmd.Env = append(os.Environ(), "DDP_INJECT_INF_STEP=3", "DDP_INJECT_INF_RANK=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("bf16")
	if err == nil || !strings.Contains(out, "step 3: inf or NaN gradient after the all-reduce, on rank [1]") {
		t.Fatalf("bf16 with an inf at step 3 on rank 1: %v\n%s", err, out)
	}
	out, err = run("fp16")
	if err != nil || !strings.Contains(out, "skipped 1") {
		t.Fatalf("fp16 with an inf at step 3 on rank 1 should skip it: %v\n%s", err, out)
	}
}

// --check-leaks passes on the shipped MNIST configs (issue 29, item 2): the logits a model keeps
// from one step to the next (Predict reads them) are not a leak.
func TestTrain_checkLeaksOnShippedConfigs(t *testing.T) {
	for _, c := range []struct{ name, config, precision string }{
		{"mlp", "../../configs/mnist-mlp.yaml", "fp32"},
		{"mlp-fp16", "../../configs/mnist-mlp.yaml", "fp16"},
		{"resnet", "../../configs/mnist-resnet.yaml", "fp32"},
	} {
		out, err := runTrain(t, nil, "--config", c.config, "--set", "train.max_steps=3", "--set", "train.micro_batch=16",
			"--set", "data.path="+mnistDir(t), "--set", "checkpoint.dir="+filepath.Join(t.TempDir(), "ck"),
			"--set", "precision="+c.precision, "--set", "train.eval_batches=1", "--check-leaks")
		if err != nil {
			t.Errorf("%s --check-leaks: %v\n%s", c.name, err, out)
		}
	}
}

// --memory-report shows the parameters as the settings line does (issue 29, item 11): the
// tensors' own bytes in one unit, the allocator's rounding a row of its own.
func TestTrain_memoryReportMatchesSettings(t *testing.T) {
	mem := filepath.Join(t.TempDir(), "mem.png")
	out, err := runTrain(t, nil, append(smallRun(t, filepath.Join(t.TempDir(), "ck")), "--set", "train.max_steps=3", "--set", "precision=fp32",
		"--memory-report", "--memory-plot", mem)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The memory plot's title keeps off the top edge (issue 29, item 7): its first rows are blank.
	f, err := os.Open(mem)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for y := img.Bounds().Min.Y; y < img.Bounds().Min.Y+8; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r != 0xffff || g != 0xffff || b != 0xffff {
				t.Fatalf("the memory plot draws at (%d,%d), in the top margin: its title touches the edge", x, y)
			}
		}
	}
	m := regexp.MustCompile(`\d+ \(([0-9.]+ [KMG]iB) f32\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no parameters in the settings line:\n%s", out)
	}
	row := regexp.MustCompile(`parameters \(compute copy\)\s+([0-9.]+ [KMG]iB)`).FindStringSubmatch(out)
	if row == nil || row[1] != m[1] {
		t.Fatalf("the settings line says %s of parameters, the memory report %v:\n%s", m[1], row, out)
	}
	// and it ends with the step's own blocks at its peak, by layer (the MLP's first layer the largest)
	if !regexp.MustCompile(`step 2's peak: [0-9.]+ [KMG]iB allocated, [0-9.]+ [KMG]iB of it the step's own blocks`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  fc\.0 +[0-9.]+ [KMG]iB +[0-9.]+%$`).MatchString(out) {
		t.Fatalf("the memory report has no peak by layer:\n%s", out)
	}
}
