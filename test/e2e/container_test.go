//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Clients in containers: each side of a connection runs in a user, pid and
// mount namespace of its own, root inside, as a container runtime starts
// them. CUSE names the caller by the uid and the thread id that ucmd's own
// namespaces see (docs/cuse.md §2.8), so the connection must work through
// process_vm_* on those ids, the files must count against the uids the
// host sees (the limits are per host uid: docs/cuse.md §3), and the
// inherited-fd check must still refuse a forked child inside the container.
func TestDaemonClientsInContainers(t *testing.T) {
	d, g0, g1 := startSimPair(t)
	bin := ucmclientBin(t)
	const srvBase, cliBase = 100000, 200000

	srv := startBackground(t, "the server in a container",
		inContainer(srvBase, bin, "-D", "/dev/infiniband/ucm1", "--no-verbs", "-l", "0x2003", "-n", "1"))
	d.waitListening(t, 1)
	checkOpener(t, d, 1, srv.cmd.Process.Pid, srvBase, "LISTEN")

	// The client holds its connection so that status sees it.
	cli := startBackground(t, "the client in a container",
		inContainer(cliBase, bin, "-D", "/dev/infiniband/ucm0", "--no-verbs", "-c", "-s", "0x2003",
			"-G", g0, "-g", g1, "-n", "1", "--hold", "3000"))
	deadline := time.Now().Add(10 * time.Second)
	for !hasState(d, 0, "ESTABLISHED") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	checkOpener(t, d, 0, cli.cmd.Process.Pid, cliBase, "ESTABLISHED")

	for _, b := range []*background{cli, srv} {
		if err := b.wait(30 * time.Second); err != nil {
			t.Errorf("%s: %v\n%s", b.what, err, b.out.String())
		}
	}

	t.Run("cred-check", func(t *testing.T) {
		c := inContainer(cliBase, bin, "--cred-check", "-D", "/dev/infiniband/ucm0")
		out, err := c.CombinedOutput()
		t.Logf("ucmclient --cred-check in a container:\n%s", out)
		if err != nil || !strings.Contains(string(out), "cred-check: all ok") {
			t.Errorf("ucmclient --cred-check in a container: %v", err)
		}
	})

	d.wantNoFiles(t)
}

// background is a command started by startBackground.
type background struct {
	what string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	err  error
}

// startBackground starts c, its output in out; the test's cleanup kills
// it if it still runs.
func startBackground(t *testing.T, what string, c *exec.Cmd) *background {
	t.Helper()
	b := &background{what: what, cmd: c, done: make(chan struct{})}
	c.Stdout, c.Stderr = &b.out, &b.out
	if err := c.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	go func() { b.err = c.Wait(); close(b.done) }()
	t.Cleanup(func() {
		c.Process.Kill()
		<-b.done
	})
	return b
}

// wait waits up to timeout for the command to exit, and returns how it did.
func (b *background) wait(timeout time.Duration) error {
	select {
	case <-b.done:
		return b.err
	case <-time.After(timeout):
		return fmt.Errorf("did not finish within %v", timeout)
	}
}

// inContainer runs bin as root of new user, pid and mount namespaces whose
// 65,536 uids and gids are base onwards on the host. The child sets its
// ids once the maps are written, as a container runtime does: a process
// keeps its creator's ids (root's, here) until it does.
func inContainer(base int, bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
		// setgroups is denied in a namespace whose gid map its
		// creator wrote without enabling it.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		Pdeathsig:  syscall.SIGKILL,
	}
	return c
}

func hasState(d *daemon, dev int, state string) bool {
	s, err := d.status()
	if err != nil || len(s.Devices) <= dev {
		return false
	}
	for _, f := range s.Devices[dev].Files {
		for _, id := range f.IDs {
			if id.State == state {
				return true
			}
		}
	}
	return false
}

// checkOpener: device dev has exactly one file, opened by the container's
// first process (pid as ucmd's pid namespace sees it) under the host uid
// that is root in the container, with an id in state, and status's users
// count the file against that uid.
func checkOpener(t *testing.T, d *daemon, dev, pid int, uid uint32, state string) {
	t.Helper()
	s, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	files := s.Devices[dev].Files
	if len(files) != 1 {
		t.Fatalf("device %d: %d files, want the container's one: %+v", dev, len(files), files)
	}
	f := files[0]
	if f.PID != pid || f.UID != uid {
		t.Errorf("device %d's file: pid %d uid %d, want pid %d uid %d (the host's ids of the container's root)", dev, f.PID, f.UID, pid, uid)
	}
	found := false
	for _, id := range f.IDs {
		found = found || id.State == state
	}
	if !found {
		t.Errorf("device %d's file has no id in %s: %+v", dev, state, f.IDs)
	}
	for _, u := range s.Limits.Users {
		if u.UID == uid {
			if u.Files != 1 {
				t.Errorf("users: uid %d has %d files, want 1", uid, u.Files)
			}
			return
		}
	}
	t.Errorf("users: no line for uid %d: %+v", uid, s.Limits.Users)
}
