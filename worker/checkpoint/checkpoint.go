package checkpoint

// checkpoint.go: saving and loading training checkpoints.
//
// A checkpoint is one directory, <checkpoint.dir>/step-00001234/, holding
//
//	model.safetensors   FP32 master weights, one tensor per parameter name; its
//	                    __metadata__ holds the model's spec (model.Spec.Metadata:
//	                    "model.kind", "model.layers", ...)
//	config.json         the model's spec (model.Spec.JSON): with the weights, a
//	                    checkpoint opens without the run's YAML (model.Open)
//	optim.safetensors   optimizer state (AdamW m and v, SGD momentum …)
//	state.json          the caller's JSON: step, scaler, loader position, RNG,
//	                    config hash …
//	MANIFEST.json       format version, step, and the size and sha256 of each
//	                    of the files above
//
// A sharded run's checkpoint (ddp.shard_optimizer) holds optim-rank-NNNNN.safetensors, one per
// rank, instead of optim.safetensors, and a manifest of format 2 with a shards record (shards.go).
//
// config.json is optional within format 1: checkpoints written before it existed
// have none (and no spec in the metadata) and still load; when the manifest lists
// it, it is verified like the others.
//
// Writing is atomic: everything goes into <dir>/.tmp-step-00001234-<random>/,
// each file is fsynced, the manifest is written last and fsynced, the
// directory is renamed to its final name and the parent directory fsynced. A
// crash leaves either no step-… directory or a complete one; .tmp-… leftovers
// are ignored by readers and cleared by Prune. commitCheckpoint is
// that write, for a save and for a checkpoint received from another host
// (ckpt_sync.go) alike.
//
// Loading verifies the manifest first (every file present, of the recorded
// size and sha256) and only then decodes; a checkpoint is loaded whole or not
// at all. A sharded checkpoint's shard files are verified by Verify (and so by
// Latest) and, on a resume, by each rank as it reads the ones it needs.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goddp/goddp/model"
)

// Checkpoint file names and the manifest format. Bump Format on any incompatible change; readers
// refuse versions they do not know.
const (
	Format       = 1
	FileWeights  = "model.safetensors"
	FileOptim    = "optim.safetensors"
	FileState    = "state.json"
	FileManifest = "MANIFEST.json"
	// FileConfig is the model's spec (model.Spec.JSON).
	FileConfig = model.ConfigFile

	dirPrefix      = "step-"
	tmpPrefix      = ".tmp-"
	stepDirPattern = "step-%08d"
)

// requiredFiles are the files a manifest must list, in write order; optionalFiles those it may
// list (then verified and copied like the others).
var (
	requiredFiles = []string{FileWeights, FileOptim, FileState}
	optionalFiles = []string{FileConfig}
)

// StepDir is the directory of step's checkpoint in dir: dir/step-00001234.
func StepDir(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf(stepDirPattern, step))
}

// listedFiles are the data files m lists: the required ones and the optional ones it has; for a
// sharded checkpoint, optim-rank-NNNNN.safetensors of every rank in optim.safetensors' place.
func (m *Manifest) listedFiles() []string {
	fs := append([]string(nil), requiredFiles...)
	if m.Shards != nil {
		fs = []string{FileWeights, FileState}
		for r := range m.Shards.WorldSize {
			fs = append(fs, OptimRankFile(r))
		}
	}
	for _, f := range optionalFiles {
		if _, ok := m.Files[f]; ok {
			fs = append(fs, f)
		}
	}
	return fs
}

// Checkpoint is a loaded, verified checkpoint.
type Checkpoint struct {
	Path    string
	Step    int
	Weights []model.NamedTensor // sorted by name
	Optim   []model.NamedTensor // sorted by name; nil when sharded (OptimRanges reads it)
	State   json.RawMessage     // state.json as written
	// Spec is the model's spec from config.json (or the weights' __metadata__); nil for a
	// checkpoint written before checkpoints carried one.
	Spec *model.Spec

	shards *ShardLayout            // the manifest's shards record, or nil
	files  map[string]ManifestFile // the manifest's records
}

// Manifest is MANIFEST.json.
type Manifest struct {
	Format int                     `json:"format_version"`
	Step   int                     `json:"step"`
	Files  map[string]ManifestFile `json:"files"`
	// Shards is a sharded checkpoint's layout (format 2, shards.go); nil (absent) otherwise.
	Shards *ShardLayout `json:"shards,omitempty"`
}

// ManifestFile is one file's record in the manifest.
type ManifestFile struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Save writes a checkpoint of step into dir (created if needed)
// and returns the final directory. state is marshalled to state.json. An
// existing checkpoint of the same step is replaced. It writes no model spec:
// SaveModel does.
func Save(dir string, step int, weights, optim []model.NamedTensor, state any) (path string, err error) {
	return saveCheckpoint(dir, step, nil, weights, optim, nil, state)
}

// SaveModel is Save with the model's spec in the weights'
// __metadata__ and in config.json, so that the checkpoint stands alone.
func SaveModel(dir string, step int, spec model.Spec, weights, optim []model.NamedTensor, state any) (path string, err error) {
	return saveCheckpoint(dir, step, &spec, weights, optim, nil, state)
}

// SaveSharded is SaveModel for a sharded run: the optimizer state is shards' per-rank files
// (format 2, shards.go) instead of optim.safetensors.
func SaveSharded(dir string, step int, spec model.Spec, weights []model.NamedTensor, shards *OptimShards, state any) (path string, err error) {
	if shards == nil {
		return "", fmt.Errorf("checkpoint: step %d: no optimizer shards", step)
	}
	return saveCheckpoint(dir, step, &spec, weights, nil, shards, state)
}

func saveCheckpoint(dir string, step int, spec *model.Spec, weights, optim []model.NamedTensor, shards *OptimShards, state any) (path string, err error) {
	if step < 0 {
		return "", fmt.Errorf("checkpoint: step %d < 0", step)
	}
	stateJSON, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return "", fmt.Errorf("checkpoint: encoding state.json: %w", err)
	}
	meta := map[string]string{"format": "pt", "step": strconv.Itoa(step)}
	wmeta := meta
	names := requiredFiles
	if spec != nil {
		wmeta = spec.Metadata()
		for k, v := range meta {
			wmeta[k] = v
		}
		names = append(append([]string(nil), requiredFiles...), FileConfig)
	}
	contents := map[string]func() ([]byte, error){
		FileWeights: func() ([]byte, error) { return encodeSafetensors(weights, wmeta) },
		FileOptim:   func() ([]byte, error) { return encodeSafetensors(optim, meta) },
		FileState:   func() ([]byte, error) { return append(stateJSON, '\n'), nil },
		FileConfig:  func() ([]byte, error) { return spec.JSON(), nil },
	}
	man := Manifest{Format: Format, Step: step, Files: map[string]ManifestFile{}}
	if shards != nil {
		l := shards.Layout
		if err := l.check(); err != nil {
			return "", fmt.Errorf("checkpoint: step %d: %w", step, err)
		}
		if len(shards.Files) != l.WorldSize {
			return "", fmt.Errorf("checkpoint: step %d: %d shard files for a world of %d", step, len(shards.Files), l.WorldSize)
		}
		man.Format, man.Shards = FormatSharded, &l
		names = append([]string(nil), names...)
		names = append(names[:1], names[2:]...) // no optim.safetensors
		for r, b := range shards.Files {
			contents[OptimRankFile(r)] = func() ([]byte, error) { return b, nil }
			names = append(names, OptimRankFile(r))
		}
	}
	files := map[string][]byte{}
	for _, f := range names {
		b, err := contents[f]()
		if err != nil {
			return "", fmt.Errorf("checkpoint: %s: %w", f, err)
		}
		files[f] = b
		sum := sha256.Sum256(b)
		man.Files[f] = ManifestFile{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	mb, _ := json.MarshalIndent(man, "", "  ")
	files[FileManifest] = append(mb, '\n')
	return commitCheckpoint(dir, step, files, false)
}

// commitCheckpoint is the one atomic write of a checkpoint directory, for Save and for
// one received from another rank (ckpt_sync.go). files holds the data files (requiredFiles, and those
// of optionalFiles the checkpoint has) and MANIFEST.json. They go into a fresh
// <dir>/.tmp-step-N-… directory, each fsynced, the manifest last (a directory with a manifest
// is complete); the directory is fsynced; with verify, it is
// read back and checked against its manifest; then it is renamed to <dir>/step-N — an existing
// directory of that step (an older save, or a broken copy Latest skipped) is moved
// aside first, since a rename cannot replace a non-empty directory, and removed once the new one
// is in place — and dir is fsynced. On any error the temporary directory is removed and an
// existing step-N is left as it was.
func commitCheckpoint(dir string, step int, files map[string][]byte, verify bool) (path string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := fmt.Sprintf(stepDirPattern, step)
	tmp, err := os.MkdirTemp(dir, tmpPrefix+name+"-"+tmpOwner()+"-")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	var man Manifest
	if err := json.Unmarshal(files[FileManifest], &man); err != nil {
		return "", fmt.Errorf("checkpoint: step %d: %s: %v", step, FileManifest, err)
	}
	if man.Shards != nil {
		if err := man.Shards.check(); err != nil { // before listing its files
			return "", fmt.Errorf("checkpoint: step %d: %s: %v", step, FileManifest, err)
		}
	}
	for _, f := range append(man.listedFiles(), FileManifest) {
		b, ok := files[f]
		if !ok {
			return "", fmt.Errorf("checkpoint: step %d: no %s to write", step, f)
		}
		if err := writeFileSync(filepath.Join(tmp, f), b); err != nil {
			return "", err
		}
	}
	if err := syncDir(tmp); err != nil {
		return "", err
	}
	if verify {
		if err := Verify(tmp); err != nil {
			return "", err
		}
	}

	final := filepath.Join(dir, name)
	if _, err := os.Stat(final); err == nil {
		old := tmp + "-old"
		if err := os.Rename(final, old); err != nil {
			return "", fmt.Errorf("checkpoint: replacing %s: %w", final, err)
		}
		defer func() {
			if err != nil {
				os.Rename(old, final) // the new one is not in place: keep the old
			} else {
				os.RemoveAll(old)
			}
		}()
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return "", err
	}
	return final, nil
}

func encodeSafetensors(ts []model.NamedTensor, meta map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	err := model.WriteSafetensors(&buf, ts, meta)
	return buf.Bytes(), err
}

// writeFileSync writes b to path and fsyncs it.
// syncFile is (*os.File).Sync; tests slow it down to stand for slow storage.
var syncFile = (*os.File).Sync

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := syncFile(f); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: closing %s: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory so that renames and new entries in it survive
// a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync directory %s: %w", dir, err)
	}
	return nil
}

// readManifest reads and checks the shape of path/MANIFEST.json.
func readManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(path, FileManifest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: %s missing (an incomplete checkpoint)", path, FileManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("checkpoint: %s/%s: not valid JSON: %v", path, FileManifest, err)
	}
	switch {
	case m.Format == Format && m.Shards == nil:
	case m.Format == FormatSharded && m.Shards != nil:
		if err := m.Shards.check(); err != nil {
			return nil, fmt.Errorf("checkpoint: %s/%s: %v", path, FileManifest, err)
		}
	case m.Format == Format || m.Format == FormatSharded:
		return nil, fmt.Errorf("checkpoint: %s/%s: format version %d with shards record %v: format 2 is a sharded checkpoint's, and only it has one", path, FileManifest, m.Format, m.Shards != nil)
	default:
		return nil, fmt.Errorf("checkpoint: %s/%s: format version %d, this build reads %d and %d", path, FileManifest, m.Format, Format, FormatSharded)
	}
	for _, f := range m.listedFiles() {
		if _, ok := m.Files[f]; !ok {
			return nil, fmt.Errorf("checkpoint: %s/%s does not list %s", path, FileManifest, f)
		}
	}
	return &m, nil
}

// readVerified reads path/name and checks it against the manifest record.
func readVerified(path, name string, rec ManifestFile) ([]byte, error) {
	p := filepath.Join(path, name)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: missing", p)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if int64(len(b)) != rec.Size {
		return nil, fmt.Errorf("checkpoint: %s: %d bytes, manifest says %d (truncated or overwritten)", p, len(b), rec.Size)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != rec.SHA256 {
		return nil, fmt.Errorf("checkpoint: %s: sha256 %s…, manifest says %s… (corrupted)", p, got[:12], short(rec.SHA256))
	}
	return b, nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Load reads the checkpoint directory path, verifying every file
// against the manifest before decoding any. A missing, truncated or
// corrupted file is an error naming it; nothing is returned half-loaded.
// A sharded checkpoint's optimizer shard files are left to OptimRanges, which
// reads and verifies only those a rank needs.
func Load(path string) (*Checkpoint, error) {
	m, err := readManifest(path)
	if err != nil {
		return nil, err
	}
	raw := map[string][]byte{}
	for _, f := range m.listedFiles() {
		if optimRankRE.MatchString(f) {
			continue // read, and verified, by the ranks that need them (OptimRanges)
		}
		if raw[f], err = readVerified(path, f, m.Files[f]); err != nil {
			return nil, err
		}
	}
	c := &Checkpoint{Path: path, Step: m.Step, shards: m.Shards, files: m.Files}
	var meta map[string]string
	if c.Weights, meta, err = model.ParseSafetensors(raw[FileWeights]); err != nil {
		return nil, fmt.Errorf("checkpoint: %s/%s: %w", path, FileWeights, err)
	}
	if b, ok := raw[FileConfig]; ok {
		s, err := model.ParseSpec(b)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %s/%s: %w", path, FileConfig, err)
		}
		c.Spec = &s
	} else if s, ok, err := model.SpecFromMetadata(meta); err != nil {
		return nil, fmt.Errorf("checkpoint: %s/%s: %w", path, FileWeights, err)
	} else if ok {
		c.Spec = &s
	}
	if m.Shards == nil {
		if c.Optim, _, err = model.ParseSafetensors(raw[FileOptim]); err != nil {
			return nil, fmt.Errorf("checkpoint: %s/%s: %w", path, FileOptim, err)
		}
	}
	if !json.Valid(raw[FileState]) {
		return nil, fmt.Errorf("checkpoint: %s/%s: not valid JSON", path, FileState)
	}
	c.State = json.RawMessage(bytes.TrimSpace(raw[FileState]))
	return c, nil
}

// Verify checks the manifest and every file's size and sha256
// without decoding.
func Verify(path string) error {
	m, err := readManifest(path)
	if err != nil {
		return err
	}
	for _, f := range m.listedFiles() {
		if _, err := readVerified(path, f, m.Files[f]); err != nil {
			return err
		}
	}
	return nil
}

// StepDirs lists dir's step-NNNNNNNN directories, newest (highest step)
// first. A missing dir is an empty list.
func StepDirs(dir string) ([]string, []int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	type sd struct {
		name string
		step int
	}
	var ds []sd
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), dirPrefix))
		if err != nil || n < 0 {
			continue
		}
		ds = append(ds, sd{e.Name(), n})
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].step > ds[j].step })
	names, steps := make([]string, len(ds)), make([]int, len(ds))
	for i, d := range ds {
		names[i], steps[i] = filepath.Join(dir, d.name), d.step
	}
	return names, steps, nil
}

// Latest returns the newest checkpoint in dir that verifies, or ""
// when there is none (including when dir does not exist). Broken ones are
// logged and skipped; .tmp-… directories are never considered.
func Latest(dir string) (path string, err error) {
	path, _, err = newestVerified(dir)
	return path, err
}

// newestVerified is Latest, also returning why each newer step
// directory was skipped.
func newestVerified(dir string) (path string, broken []error, err error) {
	paths, _, err := StepDirs(dir)
	if err != nil {
		return "", nil, err
	}
	for _, p := range paths {
		if err := Verify(p); err != nil {
			slog.Warn("checkpoint: skipping a broken checkpoint", "path", p, "err", err)
			broken = append(broken, err)
			continue
		}
		return p, broken, nil
	}
	return "", broken, nil
}

// ErrAllBroken is the error of Resume when a directory holds
// checkpoints and not one of them verifies.
var ErrAllBroken = errors.New("checkpoint: every checkpoint is broken")

// brokenPrefix names a broken checkpoint set aside by a fresh start: no longer a
// step-… directory, so never resumed, counted or pruned.
const brokenPrefix = "broken-"

// Resume is the checkpoint a run in dir resumes from: the newest that
// verifies (Latest), or "" when dir holds none. When dir holds step
// directories but none of them verifies, starting from step 0 would throw the
// run's progress away without a word, so it is an error wrapping
// ErrAllBroken and naming every broken file. With fresh
// (checkpoint.fresh_if_broken) it logs them, renames each step-N to broken-step-N
// (kept for a look, and out of the way: Prune' cheap size check could
// otherwise count a corrupted newer one as complete and prune the new run's
// checkpoints in its favour) and returns "".
func Resume(dir string, fresh bool, log *slog.Logger) (string, error) {
	path, broken, err := newestVerified(dir)
	if err != nil || path != "" || len(broken) == 0 {
		return path, err
	}
	if fresh {
		paths, _, _ := StepDirs(dir)
		for _, p := range paths {
			aside := filepath.Join(dir, brokenPrefix+filepath.Base(p))
			if err := os.Rename(p, aside); err != nil && !errors.Is(err, fs.ErrNotExist) { // another rank may have moved it
				log.Warn("checkpoint: could not set a broken checkpoint aside", "path", p, "err", err)
			}
		}
		log.Warn("checkpoint: every checkpoint is broken; starting from step 0 (checkpoint.fresh_if_broken), the broken ones renamed "+brokenPrefix+"step-…",
			"dir", dir, "broken", len(broken))
		return "", nil
	}
	msgs := make([]string, len(broken))
	for i, b := range broken {
		msgs[i] = b.Error()
	}
	return "", fmt.Errorf("%w in %s, so there is nothing to resume from: %s; move them away, or set checkpoint.fresh_if_broken to start from step 0",
		ErrAllBroken, dir, strings.Join(msgs, "; "))
}

// Prune keeps the keep newest complete checkpoints in dir and
// removes older ones, and removes leftover .tmp-… directories of interrupted
// saves. "Complete" here is the cheap check (manifest readable, every file of
// its recorded size); incomplete step directories newer than the kept ones
// are left for Latest to skip. Do not run it concurrently with
// Save on the same dir.
func Prune(dir string, keep int) error {
	if keep < 1 {
		return fmt.Errorf("checkpoint: keep %d: want >= 1", keep)
	}
	paths, _, err := StepDirs(dir)
	if err != nil {
		return err
	}
	kept := 0
	var errs []error
	for _, p := range paths {
		if kept < keep {
			if sizesMatch(p) {
				kept++
			}
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint: pruning %s: %w", p, err))
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), tmpPrefix) && tmpIsOursOrStale(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("checkpoint: removing %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Temporary directories carry their writer: .tmp-step-N-<host>-<pid>-<random>. Pruning removes
// only this process's and those of dead processes of this host (an interrupted save), never one
// another live writer may be filling: another host's on a shared filesystem, or another job's in
// the same checkpoint.dir (the two sides of a partition did that to each other).

// tmpOwner is this process's tag in its temporary directories.
func tmpOwner() string { return fmt.Sprintf("%s-%d", hostTag(), os.Getpid()) }

// hostTag is the host name as it can stand in a file name.
func hostTag() string {
	host, _ := os.Hostname()
	return strings.Map(func(r rune) rune {
		if r == '/' || r < ' ' {
			return '_'
		}
		return r
	}, host)
}

// tmpIsOursOrStale says whether a temporary directory name is this process's, or a dead process's
// of this host. Names it cannot read are left alone.
func tmpIsOursOrStale(name string) bool {
	rest := strings.TrimPrefix(name, tmpPrefix)
	// rest: step-NNNNNNNN-<host>-<pid>-<random>[-old]
	rest = strings.TrimSuffix(rest, "-old")
	parts := strings.Split(rest, "-")
	if len(parts) < 5 || parts[0] != "step" {
		return false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return false
	}
	if strings.Join(parts[2:len(parts)-2], "-") != hostTag() {
		return false // another host's (a shared filesystem)
	}
	if pid == os.Getpid() {
		return true
	}
	err = syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH) // no such process: an interrupted save
}

func sizesMatch(path string) bool {
	m, err := readManifest(path)
	if err != nil {
		return false
	}
	for _, f := range m.listedFiles() {
		st, err := os.Stat(filepath.Join(path, f))
		if err != nil || st.Size() != m.Files[f].Size {
			return false
		}
	}
	return true
}

// Resolve is path itself when it is a checkpoint (a step directory with a manifest), or the
// newest complete checkpoint in it when it is a checkpoint.dir.
func Resolve(path string) (string, error) {
	if _, err := os.Stat(filepath.Join(path, FileManifest)); err == nil {
		return path, nil
	}
	latest, err := Latest(path)
	if err != nil {
		return "", err
	}
	if latest == "" {
		return "", fmt.Errorf("worker: %s is neither a checkpoint (no %s) nor a directory holding one", path, FileManifest)
	}
	return latest, nil
}

// abandonedPrefix names a checkpoint newer than the step a run went back to (--resume-from an
// earlier step of the same checkpoint.dir): no longer a step-… directory, so never resumed, counted
// or pruned, and kept for a look.
const abandonedPrefix = "abandoned-"

// SetAsideAfter renames dir's step directories newer than step to abandoned-<time>-step-N, so that
// a run going back to step (its own earlier checkpoint) does not mix with the future it abandons:
// pruning keeps the newest, and a restart resumes from the newest. It returns the paths set aside.
// Another rank may have moved one already; that is not an error.
func SetAsideAfter(dir string, step int) ([]string, error) {
	paths, steps, err := StepDirs(dir)
	if err != nil {
		return nil, err
	}
	stamp := time.Now().UTC().Format("20060102T150405")
	var moved []string
	for i, p := range paths {
		if steps[i] <= step {
			continue
		}
		aside := filepath.Join(dir, abandonedPrefix+stamp+"-"+filepath.Base(p))
		if err := os.Rename(p, aside); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return moved, fmt.Errorf("checkpoint: setting aside %s (newer than step %d): %w", p, step, err)
		}
		moved = append(moved, aside)
	}
	return moved, nil
}
