package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/goddp/goddp/launcher"
)

// Rank 0 whose MASTER_PORT another process holds exits launcher.ExitMasterPortTaken, naming the
// address, so that ddplaunch (which drew the port) starts the job again on another one.
func TestTrain_masterPortTakenExitStatus(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	env := []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port)}
	out, err := runTrain(t, env, smallRun(t, t.TempDir())...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != launcher.ExitMasterPortTaken {
		t.Fatalf("got %v, want exit status %d\n%s", err, launcher.ExitMasterPortTaken, out)
	}
	if want := fmt.Sprintf("MASTER_ADDR:MASTER_PORT 127.0.0.1:%d is taken by another process", port); !strings.Contains(out, want) {
		t.Fatalf("output does not say %q:\n%s", want, out)
	}
}
