package conformance

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// WriteAs implements CredWriter: on a thread of its own, which is thrown
// away afterwards, it switches fsuid and fsgid (needs root) and writes.
func (f *nodeFile) WriteAs(uid, gid uint32, b []byte) (int, error) {
	if unix.Geteuid() != 0 {
		return 0, fmt.Errorf("switching credentials needs root: %w", ErrSkip)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine, so its
		// changed credentials die with it.
		runtime.LockOSThread()
		unix.Setfsgid(int(gid))
		unix.Setfsuid(int(uid))
		// The calls report no failure, only the previous value: asked
		// again (-1 changes nothing), they say whether it took. Root
		// without CAP_SETUID (a container) would write as itself, and
		// the case fail for the machine, not the device.
		fsgid, _ := unix.SetfsgidRetGid(-1)
		fsuid, _ := unix.SetfsuidRetUid(-1)
		if fsuid != int(uid) || fsgid != int(gid) {
			done <- result{0, fmt.Errorf("could not switch to fsuid %d fsgid %d (CAP_SETUID, CAP_SETGID?): %w", uid, gid, ErrSkip)}
			return
		}
		n, err := f.Write(b)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}
