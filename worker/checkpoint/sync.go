package checkpoint

// ckpt_sync.go: before a resume, the ranks agree on the newest complete checkpoint any of them can
// see and copy it to those whose checkpoint.dir lacks it. On one host, or hosts sharing a
// filesystem, every rank sees the same directory and nothing moves. On hosts with their own disks
// (checkpoint.per_host), a restarted job resumes from whatever the survivors have, even when the
// host that wrote the newest one is gone or a new host joins with an empty disk.
//
// The exchange is three collectives: an all-gather of each rank's newest step; when some rank
// lacks the newest, a broadcast of its size and then of its files (MANIFEST.json included) from
// the lowest rank that has it; each receiving host's local rank 0 writes it atomically and
// verifies it against its manifest; a barrier, so no rank loads before its host's copy is in place.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goddp/goddp/allreduce"
)

// ExpandDir replaces {node} in checkpoint.dir with this host's NODE_RANK.
func ExpandDir(dir string, nodeRank int) string {
	return strings.ReplaceAll(dir, "{node}", strconv.Itoa(nodeRank))
}

// IsWriter says whether a rank writes checkpoints (State.Save): global rank 0 always; with
// checkpoint.per_host, local rank 0 of every host too.
func IsWriter(perHost bool, rank, localRank int) bool {
	return rank == 0 || (perHost && localRank == 0)
}

// Sync runs on every rank of a multi-rank job before the resume: afterwards every host's dir
// holds the newest checkpoint any rank had. rank and localRank are this process's (RANK,
// LOCAL_RANK).
func Sync(ctx context.Context, g *allreduce.Group, dir string, rank, localRank int, log *slog.Logger) error {
	if g.Size() == 1 {
		return nil
	}
	mine := -1
	path, err := Latest(dir)
	if err != nil {
		return err
	}
	if path != "" {
		if mine, err = StepOf(path); err != nil {
			return err
		}
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(int64(mine)))
	all, err := g.AllGather(ctx, b[:])
	if err != nil {
		return fmt.Errorf("checkpoint: agreeing on the newest checkpoint: %w", err)
	}
	steps := make([]int, len(all))
	best, owner, lacking := -1, -1, 0
	for r, v := range all {
		if len(v) != 8 {
			return fmt.Errorf("checkpoint: rank %d sent a malformed checkpoint step (%d bytes)", r, len(v))
		}
		steps[r] = int(int64(binary.LittleEndian.Uint64(v)))
		if steps[r] > best {
			best, owner = steps[r], r
		}
	}
	for _, s := range steps {
		if s < best {
			lacking++
		}
	}
	if best < 0 || lacking == 0 {
		return nil
	}
	log.Info("checkpoint: copying the newest checkpoint to ranks that lack it", "step", best, "from_rank", owner, "ranks_lacking", lacking)

	var bundle []byte
	if rank == owner {
		if bundle, err = packCheckpoint(path); err != nil {
			return err
		}
	}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(bundle)))
	if err := g.Broadcast(ctx, size[:], owner); err != nil {
		return fmt.Errorf("checkpoint: receiving step %d from rank %d: %w", best, owner, err)
	}
	if rank != owner {
		bundle = make([]byte, binary.LittleEndian.Uint64(size[:]))
	}
	if err := g.Broadcast(ctx, bundle, owner); err != nil {
		return fmt.Errorf("checkpoint: receiving step %d from rank %d: %w", best, owner, err)
	}
	if steps[rank] < best && localRank == 0 {
		files, err := unpackCheckpoint(bundle)
		if err != nil {
			return fmt.Errorf("checkpoint: step %d from rank %d: %w", best, owner, err)
		}
		got, err := writeCheckpointFiles(dir, best, files)
		if err != nil {
			return err
		}
		log.Info("checkpoint: received and verified", "path", got, "from_rank", owner)
	}
	if err := g.Barrier(ctx); err != nil {
		return fmt.Errorf("checkpoint: waiting for every host's copy of step %d: %w", best, err)
	}
	return nil
}

// StepOf reads the step from a checkpoint directory's manifest.
func StepOf(path string) (int, error) {
	m, err := readManifest(path)
	if err != nil {
		return 0, err
	}
	return m.Step, nil
}

// packCheckpoint reads a checkpoint's files (manifest included) into one buffer: for each file,
// its name's length (u32), the name, its size (u64) and its bytes.
func packCheckpoint(path string) ([]byte, error) {
	m, err := readManifest(path)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, name := range append(m.listedFiles(), FileManifest) {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(len(name)))
		out = append(out, name...)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// unpackCheckpoint is packCheckpoint's inverse; it accepts only a checkpoint's own file names
// (optim-rank-NNNNN.safetensors included); which of them must be there is the manifest's to say.
func unpackCheckpoint(b []byte) (map[string][]byte, error) {
	allowed := map[string]bool{FileManifest: true}
	for _, f := range append(append([]string(nil), requiredFiles...), optionalFiles...) {
		allowed[f] = true
	}
	files := map[string][]byte{}
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("truncated bundle")
		}
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if n > len(b) || n > 256 {
			return nil, fmt.Errorf("truncated bundle (file name)")
		}
		name := string(b[:n])
		b = b[n:]
		if !allowed[name] && !optimRankRE.MatchString(name) { // a sharded checkpoint's optimizer shards
			return nil, fmt.Errorf("unexpected file %q in the bundle", name)
		}
		if len(b) < 8 {
			return nil, fmt.Errorf("truncated bundle (size of %s)", name)
		}
		size := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if size > uint64(len(b)) {
			return nil, fmt.Errorf("truncated bundle (%s: %d bytes announced, %d left)", name, size, len(b))
		}
		files[name] = b[:size]
		b = b[size:]
	}
	// A sharded checkpoint has no optim.safetensors: its manifest says which files it has, and
	// commitCheckpoint writes and verifies exactly those.
	if _, ok := files[FileManifest]; !ok {
		return nil, fmt.Errorf("the bundle has no %s", FileManifest)
	}
	return files, nil
}

// writeCheckpointFiles writes a received checkpoint into dir atomically (commitCheckpoint: temp
// dir, fsync, rename) and verifies every file against its manifest before the rename; it returns
// the final path.
func writeCheckpointFiles(dir string, step int, files map[string][]byte) (string, error) {
	path, err := commitCheckpoint(dir, step, files, true)
	if err != nil {
		return "", fmt.Errorf("checkpoint: received step %d: %w", step, err)
	}
	return path, nil
}
