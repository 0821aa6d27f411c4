package worker

import (
	"os"
	"time"
)

// heartbeatEvery is how often a worker tells ddplaunch it is alive.
const heartbeatEvery = time.Second

// startHeartbeat writes a byte to fd (ddplaunch's liveness pipe, DDP_HEARTBEAT_FD) every second
// from a goroutine of its own, so a slow step still beats and only a process that cannot run at
// all — stopped by SIGSTOP, frozen — goes silent; the launcher then names this rank and ends the
// job within seconds (launcher.SuperviseConfig.Silence) instead of a peer's collective timing out
// 30 s later. The returned function stops it.
func startHeartbeat(fd int) func() error {
	f := os.NewFile(uintptr(fd), "heartbeat")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			if _, err := f.Write([]byte{1}); err != nil {
				return // the launcher is gone, or this is not its pipe: nothing to tell
			}
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
	return func() error {
		close(stop)
		<-done
		return f.Close()
	}
}
