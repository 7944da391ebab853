//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Some tests need a client of another user that blocks many threads in
// write(2) on a node: this test binary, re-executed as nobody in a role.
// The child prints "READY" once its threads start, then one line per
// write that returns, "write returned: ERR".
const childEnv = "UCMD_E2E_CHILD" // "ROLE ARGS..."

// childRoles set up a child from its arguments and start its writers.
var childRoles = map[string]func(args []string) error{
	"staller": runStaller, // hungcopy_test.go
	"waiter":  runWaiter,  // waits_test.go
}

func init() {
	spec := strings.Fields(os.Getenv(childEnv))
	if len(spec) == 0 {
		return
	}
	run := childRoles[spec[0]]
	if run == nil {
		fmt.Println("child: no role", spec[0])
		os.Exit(1)
	}
	if err := run(spec[1:]); err != nil {
		fmt.Printf("%s: %v\n", spec[0], err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// writeFromThreads writes cmd to node from n goroutines, each a thread
// while its write blocks, after printing READY. Each write is raw
// (os.File lets one write at a time through) and made again after EINTR,
// as a client would: a signal to the thread (the runtime's preemption,
// SIGURG) interrupts ucmd's wait, for an event or a copy slot.
func writeFromThreads(node *os.File, cmd []byte, n int) {
	fmt.Println("READY")
	for range n {
		go func() {
			var err error
			for {
				if _, err = syscall.Write(int(node.Fd()), cmd); err != syscall.EINTR {
					break
				}
			}
			fmt.Println("write returned:", err)
		}()
	}
}

// startChild runs this binary as nobody in role, once its threads have
// started, and returns it with its output's remaining lines. A test's
// cleanup kills it.
func startChild(t *testing.T, role string, args ...any) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), strings.TrimSpace(fmt.Sprintf("%s=%s "+strings.Repeat("%v ", len(args)), append([]any{childEnv, role}, args...)...)))
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "READY" {
		t.Fatalf("%s: %q, %v", role, lines.Text(), lines.Err())
	}
	return c, lines
}
