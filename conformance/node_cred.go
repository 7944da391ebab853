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
		n, err := f.Write(b)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}
