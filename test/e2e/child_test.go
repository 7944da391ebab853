//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Some tests need a client of another user that blocks many threads in
// write(2) on a node: this test binary, re-executed as that user in a role,
// writing the role's command from THREADS threads. The child prints
// "READY" once its threads start, then one line per write that returns,
// "write returned: ERR".
const childEnv = "UCMD_E2E_CHILD" // "ROLE NODE THREADS ARGS..."

// childRoles make a role's command from its ARGS.
var childRoles = map[string]func(args []string) ([]byte, error){
	"staller": stallerCmd, // hungcopy_test.go
	"waiter":  waiterCmd,  // waits_test.go
}

func init() {
	spec := strings.Fields(os.Getenv(childEnv))
	if len(spec) == 0 {
		return
	}
	if err := runChild(spec); err != nil {
		fmt.Printf("child %s: %v\n", spec[0], err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Hour)
	}
}

func runChild(spec []string) error {
	if len(spec) < 3 || childRoles[spec[0]] == nil {
		return fmt.Errorf("want ROLE NODE THREADS ARGS..., with a known role, got %q", spec)
	}
	threads, err := strconv.Atoi(spec[2])
	if err != nil {
		return err
	}
	cmd, err := childRoles[spec[0]](spec[3:])
	if err != nil {
		return err
	}
	node, err := os.OpenFile(spec[1], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	writeFromThreads(node, cmd, threads)
	return nil
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

// nobody is the uid (and gid) the children run as unless a test needs
// several users.
const nobody = 65534

// startChild runs this binary as uid (and gid) uid in role, writing to
// node from threads threads, once they have started, and returns it with
// its output's remaining lines. A test's cleanup kills it.
func startChild(t *testing.T, role, node string, uid uint32, threads int, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	spec := append([]string{role, node, strconv.Itoa(threads)}, args...)
	c.Env = append(os.Environ(), childEnv+"="+strings.Join(spec, " "))
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	lines := bufio.NewScanner(out)
	ready := make(chan bool, 1)
	go func() { ready <- lines.Scan() && lines.Text() == "READY" }()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("%s as uid %d: %q, %v", role, uid, lines.Text(), lines.Err())
		}
	case <-time.After(childReady):
		c.Process.Kill() // ends the Scan
		<-ready
		t.Fatalf("%s as uid %d not ready within %v", role, uid, childReady)
	}
	return c, lines
}

// childReady is how long a child may take to open what it needs: a hang
// there fails its test, not the whole run at its timeout.
const childReady = time.Minute
