//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
)

// A GET_EVENT that waits is a goroutine of ucmd's, where the kernel let
// the caller's own thread wait, and nothing in CUSE bounds a file's
// requests in flight: ucmd bounds a user's waiting commands itself
// (--user-waits).
//
// The waiting client is a child in the role "waiter" (child_test.go): it
// opens the node and writes GET_EVENT from many threads, with no id and
// so no event ever to come.

// waiterBuf holds the GET_EVENTs' buffers, which stay unwritten.
var waiterBuf [abi.EventRespSize + 2*255]byte

// waiterCmd is the waiter's GET_EVENT.
func waiterCmd(args []string) ([]byte, error) {
	if len(args) != 0 {
		return nil, fmt.Errorf("want no arguments, got %q", args)
	}
	base := uint64(uintptr(unsafe.Pointer(&waiterBuf[0])))
	return conformance.Encode(abi.CmdEvent, abi.EventRespSize, &abi.EventGet{
		Response: base, Data: base + abi.EventRespSize, Info: base + abi.EventRespSize + 255, DataLen: 255, InfoLen: 255,
	}), nil
}

// startWaiter runs a waiter of n threads and returns it, once it starts
// them, with its output's remaining lines.
func startWaiter(t *testing.T, n int) (*exec.Cmd, <-chan string) {
	t.Helper()
	w, lines := startChild(t, "waiter", "/dev/infiniband/ucm0", nobody, n)
	ch := make(chan string, n)
	go func() {
		defer close(ch)
		for lines.Scan() {
			ch <- lines.Text()
		}
	}()
	return w, ch
}

// TestDaemonUserWaits: one user's GET_EVENTs past --user-waits fail with
// ENOMEM at once; `ucmd status` shows the waiting ones; ucmd's memory
// grows by the waits allowed, not by the user's threads; and a killed
// client's waits (each ended by the kernel's INTERRUPT) are given back.
func TestDaemonUserWaits(t *testing.T) {
	const limit, threads = 200, 1000
	d := startDaemon(t, "--fabric", "sim", "--sim-devices", "1", "--user-waits", strconv.Itoa(limit))
	before := rssOf(t, d.cmd.Process.Pid)

	w, lines := startWaiter(t, threads)
	for i := range threads - limit {
		select {
		case l := <-lines:
			if l != "write returned: "+syscall.ENOMEM.Error() {
				t.Fatalf("GET_EVENT %d past --user-waits %d: %q, want ENOMEM", i, limit, l)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of the %d GET_EVENTs past --user-waits %d answered", i, threads-limit, limit)
		}
	}
	st, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	for _, f := range st.Devices[0].Files {
		waiting += f.Waiting
	}
	if waiting != limit {
		t.Errorf("status: %d commands waiting, want %d", waiting, limit)
	}
	// The operator sees what the waits cost, which limit refused the
	// rest, and whom: each wait is charged 10 KiB of the memory budget.
	charged := int64(-1)
	for _, u := range st.Limits.Users {
		if u.UID == nobody {
			charged = u.Memory
		}
	}
	if charged < limit*10<<10 {
		t.Errorf("status: uid %d's %d waits are charged %d bytes (-1: not listed), want at least %d", nobody, limit, charged, limit*10<<10)
	}
	if n := st.Limits.Refused["user-waits"]; n < threads-limit {
		t.Errorf("status: %d refusals by user-waits, want at least %d", n, threads-limit)
	}
	if m := d.log.wait(regexp.MustCompile(`level=WARN msg="ucm: a limit refused a user" limit=--user-waits max=200 uid=65534 `)); m == nil {
		t.Errorf("no warning naming --user-waits and the user in ucmd's log")
	}
	t.Logf("ucmd's RSS: %d kB, then %d kB with %d GET_EVENTs waiting and %d refused", before, rssOf(t, d.cmd.Process.Pid), limit, threads-limit)

	// Killed, the client's waits end (INTERRUPT, EINTR) and its file is
	// released: the user's next client may wait as much.
	w.Process.Kill()
	w.Wait()
	_, lines = startWaiter(t, limit)
	deadline := time.Now().Add(30 * time.Second)
	for waiting = 0; waiting != limit && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err = d.status(); err != nil {
			t.Fatal(err)
		}
		waiting = 0
		for _, f := range st.Devices[0].Files {
			waiting += f.Waiting
		}
	}
	if waiting != limit {
		t.Errorf("after a killed client, its user's next one has %d GET_EVENTs waiting, want %d", waiting, limit)
	}
	select {
	case l := <-lines:
		t.Errorf("second waiter: GET_EVENT answered: %s", l)
	default:
	}
}

// rssOf is a process's resident set, in kB.
func rssOf(t *testing.T, pid int) int { return procStatus(t, pid, "VmRSS") }
