//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/sysmon"
	"github.com/ucmd/ucmd/ucm"
)

// A copy into a client's memory can hang for as long as that client
// likes: a response buffer in a mapping of a file on a FUSE file system
// whose server never answers the page's read. The kernel's ucm made that
// copy in the client's own thread; ucmd makes it in one of its own, which
// stays blocked in process_vm_writev. The stall is the client's to end,
// so what ucmd must bound is how many of its threads one user can hold
// that way: without a bound, a user's blocked copies took a thread each,
// until the Go runtime's limit of 10,000 ended the daemon.
//
// The stalling client is a child in the role "staller" (child_test.go):
// it maps the file, and writes CREATE_ID from many threads with the
// response in the mapping.

// stallerCmd is the staller's CREATE_ID, its response in a mapping of
// the file args[0].
func stallerCmd(args []string) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want MAPPED-FILE, got %q", args)
	}
	mf, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	m, err := syscall.Mmap(int(mf.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", args[0], err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&m[0])))
	return conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: addr}), nil
}

// stallFS is files "stall0", "stall1", ..., whose reads are answered
// only once release is closed, and then with EIO; interrupts change
// nothing.
type stallFS struct {
	fs.Inode
	release chan struct{}
}

type stallFile struct {
	fs.Inode
	release chan struct{}
}

var (
	_ fs.NodeOnAdder   = (*stallFS)(nil)
	_ fs.NodeGetattrer = (*stallFile)(nil)
	_ fs.NodeOpener    = (*stallFile)(nil)
	_ fs.NodeReader    = (*stallFile)(nil)
)

// stallFiles is how many files a stallFS has, one per staller: a second
// open of a file whose page a read holds locked would wait for that read
// (FUSE drops the file's cached pages at open), so stallers share none.
const stallFiles = 8

func (r *stallFS) OnAdd(ctx context.Context) {
	for i := range stallFiles {
		f := &stallFile{release: r.release}
		r.AddChild(fmt.Sprintf("stall%d", i), r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

func (f *stallFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o666
	out.Size = 4096
	return 0
}

func (f *stallFile) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (f *stallFile) Read(context.Context, fs.FileHandle, []byte, int64) (fuse.ReadResult, syscall.Errno) {
	<-f.release
	return nil, syscall.EIO
}

// stall is a stallFS mounted, and a client as nobody whose copies hang:
// writers threads write CREATE_ID with the response in a mapping of its
// file.
type stall struct {
	dir      string         // the mount
	started  int            // stallers, each with a file of its own
	staller  *exec.Cmd      // startStall's client
	lines    *bufio.Scanner // its output after READY
	released func()         // ends the stall; idempotent
}

// startStall mounts a stallFS and starts a staller as nobody against d's
// ucm0 (stall.start).
func startStall(t *testing.T, d *daemon, writers int) *stall {
	t.Helper()
	st := mountStall(t)
	st.staller, st.lines = st.start(t, d, nobody, writers)
	return st
}

// mountStall mounts a stallFS, unmounted by the test's cleanup after the
// stall ends.
func mountStall(t *testing.T) *stall {
	t.Helper()
	release := make(chan struct{})
	// Outside t.TempDir, whose 0700 directory other users cannot search.
	mnt, err := os.MkdirTemp("", "ucmd-stall-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	os.Chmod(mnt, 0o755)
	srv, err := fs.Mount(mnt, &stallFS{release: release}, &fs.Options{
		MountOptions: fuse.MountOptions{AllowOther: true, DirectMount: true, FsName: "stall"},
	})
	if err != nil {
		t.Fatalf("mount the stalling file system: %v", err)
	}
	st := &stall{dir: mnt, released: sync.OnceFunc(func() { close(release) })}
	t.Cleanup(func() { st.released(); srv.Unmount() })
	return st
}

// start starts a staller as uid with writers threads against d's ucm0,
// and waits until every write has reached ucmd: CREATE_ID makes the id
// before it copies the answer out.
func (st *stall) start(t *testing.T, d *daemon, uid uint32, writers int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	if st.started == stallFiles {
		t.Fatalf("more than %d stallers", stallFiles)
	}
	file := filepath.Join(st.dir, fmt.Sprintf("stall%d", st.started))
	st.started++
	// A killed staller waits for ucmd's answers, and they for the stall
	// to end: end it first (cleanups run last registered first).
	staller, lines := startChild(t, "staller", "/dev/infiniband/ucm0", uid, writers, file)
	t.Cleanup(st.released)

	waitIDs := time.Now().Add(60 * time.Second)
	for ids := 0; ids < writers; {
		if time.Now().After(waitIDs) {
			t.Fatalf("%d of the %d stalled CREATE_IDs of uid %d made their id", ids, writers, uid)
		}
		time.Sleep(50 * time.Millisecond)
		s, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		ids = 0
		for _, f := range s.Devices[0].Files {
			if f.PID == staller.Process.Pid {
				ids = len(f.IDs)
			}
		}
	}
	return staller, lines
}

func TestDaemonHungCopies(t *testing.T) {
	d := startDaemon(t, "--fabric", "sim", "--sim-devices", "1")
	before := threadsOf(t, d.cmd.Process.Pid)
	const writers = 100
	st := startStall(t, d, writers)
	staller, lines, released := st.staller, st.lines, st.released
	during := threadsOf(t, d.cmd.Process.Pid)
	t.Logf("ucmd's threads: %d before, %d with %d copies hanging", before, during, writers)
	if during-before > maxHungThreads {
		t.Errorf("one user's %d hanging copies hold %d more of ucmd's threads, want at most %d", writers, during-before, maxHungThreads)
	}

	// The operator sees it: the waits are logged, at warning level once.
	warned := regexp.MustCompile(`level=WARN msg="ucm: a user's copies into its processes' memory hang.* uid=65534`)
	if lines := d.log.wait(warned); len(lines) == 0 {
		t.Errorf("no warning of the hung copies in ucmd's log")
	}

	// Other users are served meanwhile.
	c := openClient(t, "/dev/infiniband/ucm0")
	done := make(chan error, 1)
	go func() { _, err := c.CreateID(7); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("CREATE_ID of another user while the copies hang: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CREATE_ID of another user not answered while one user's copies hang")
	}

	// The stall ends: the hung copies fail, and the writes with them.
	released()
	efault := 0
	deadline := time.AfterFunc(30*time.Second, func() { staller.Process.Kill() })
	defer deadline.Stop()
	for efault < writers && lines.Scan() {
		if strings.Contains(lines.Text(), "bad address") {
			efault++
		}
	}
	if efault < writers {
		t.Errorf("%d of %d stalled writes returned EFAULT once the stall ended", efault, writers)
	}
	if _, err := d.status(); err != nil {
		t.Errorf("ucmd after the stall: %v", err)
	}
}

// TestDaemonCopiesAcrossUsers: one person may be many uids (a user
// namespace on its subordinate uids), so each uid's bound on hung copies
// (--user-copies) is not enough: all users' copies in progress are
// bounded too (--copies). Past it the copies of every user wait, parked,
// holding no thread; status counts them; the wait is logged; and the
// stall's end completes them all.
func TestDaemonCopiesAcrossUsers(t *testing.T) {
	const users, perUser, userCopies, copies = 3, 4, 4, 6
	d := startDaemon(t, "--fabric", "sim", "--sim-devices", "1",
		"--user-copies", strconv.Itoa(userCopies), "--copies", strconv.Itoa(copies))
	before := threadsOf(t, d.cmd.Process.Pid)
	st := mountStall(t)
	var all []*bufio.Scanner
	for i := range users {
		_, lines := st.start(t, d, nobody-uint32(i), perUser)
		all = append(all, lines)
	}

	// Each uid is within its own bound; together they are past --copies.
	want := users*perUser - copies
	var s statusJSON
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if s, err = d.status(); err != nil {
			t.Fatal(err)
		}
		waiting := 0
		for _, f := range s.Devices[0].Files {
			waiting += f.CopyWaiting
		}
		if waiting == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %d commands waiting for a copy slot, want %d (%d users' %d copies, --copies %d)",
				waiting, want, users, users*perUser, copies)
		}
	}
	if len(s.Limits.Users) != users {
		t.Errorf("status: %d users, want %d: %+v", len(s.Limits.Users), users, s.Limits.Users)
	}
	// A write interrupted in its wait (EINTR) destroys its id and is made
	// again, so a uid may hold one id fewer for a moment, never more. The
	// users whose copies hang are told apart from those waiting: each
	// holds at most its --user-copies, and together they hold --copies.
	copying := 0
	for _, u := range s.Limits.Users {
		if u.Files != 1 || u.IDs > perUser || u.Copies > userCopies {
			t.Errorf("status: uid %d holds %d files, %d ids and %d copies, want 1 and at most %d and %d", u.UID, u.Files, u.IDs, u.Copies, perUser, userCopies)
		}
		copying += u.Copies
	}
	if copying != copies || s.Limits.Copies != copies {
		t.Errorf("status: the users' copies in progress add up to %d, all users' %d; want %d (%+v)", copying, s.Limits.Copies, copies, s.Limits.Users)
	}
	during := threadsOf(t, d.cmd.Process.Pid)
	t.Logf("ucmd's threads: %d before, %d with %d users' %d copies hanging", before, during, users, users*perUser)
	if max := copies + sysmon.MaxIdleReaders + 1; during-before > max {
		t.Errorf("%d hung copies past --copies %d hold %d more of ucmd's threads, want at most %d", users*perUser, copies, during-before, max)
	}
	if m := d.log.wait(regexp.MustCompile(`level=WARN msg="ucm: copies of many users`)); m == nil {
		t.Errorf("no warning of the daemon's copy slots taken")
	}

	// The stall ends: every copy, hung or waiting, fails with EFAULT.
	st.released()
	for i, lines := range all {
		for n := range perUser {
			done := make(chan bool, 1)
			go func() { done <- lines.Scan() }()
			select {
			case ok := <-done:
				if !ok || !strings.Contains(lines.Text(), "bad address") {
					t.Fatalf("uid %d's write %d after the stall: %q, %v; want EFAULT", nobody-i, n, lines.Text(), lines.Err())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("uid %d's write %d not answered within 30 s of the stall's end", nobody-i, n)
			}
		}
	}
}

// TestDaemonStopsWithHungCopies: ucmd stops on SIGTERM while a user's
// copies hang, which no cancellation reaches. Its CUSE servers wait a
// grace period for those requests and then release the files without
// them, so the daemon's shutdown completes (with a warning) instead of
// waiting for the user; the process ends once the kernel lets the hung
// threads go, here when the stall ends.
func TestDaemonStopsWithHungCopies(t *testing.T) {
	d := startDaemon(t, "--fabric", "sim", "--sim-devices", "1")
	st := startStall(t, d, 20)
	d.cmd.Process.Signal(syscall.SIGTERM)
	if m := d.log.wait(regexp.MustCompile(`level=WARN msg="cuse: requests still served after they were cancelled`)); m == nil {
		t.Errorf("no warning of requests left behind at shutdown")
	}
	if m := d.log.wait(regexp.MustCompile(`level=INFO msg=stopped`)); m == nil {
		t.Fatalf("ucmd's shutdown did not complete while copies hang")
	}
	// Its process ends once the kernel lets the hung threads go. No
	// second SIGTERM (d.stop): serve has restored the default action.
	st.released()
	select {
	case <-d.exited:
		if d.err != nil {
			t.Errorf("ucmd serve exited with %v", d.err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("ucmd did not exit within 15 s of the stall's end")
	}
}

// maxHungThreads is what one user's hanging copies may cost ucmd in
// threads: its copy slots (ucm.DefaultUserCopies), and the device's
// readers that may wait for requests (up to sysmon.MaxIdleReaders and one
// more) started while the hung ones were taken.
const maxHungThreads = ucm.DefaultUserCopies + sysmon.MaxIdleReaders + 1

// threadsOf is a process's threads.
func threadsOf(t *testing.T, pid int) int { return procStatus(t, pid, "Threads") }

// procStatus is the number in the line named of /proc/PID/status (for
// sizes, in kB).
func procStatus(t *testing.T, pid int, name string) int {
	t.Helper()
	return procField(t, pid, "status", name)
}

// procField is the number in the line named of /proc/PID/<file> ("name:
// value", a " kB" unit dropped).
func procField(t *testing.T, pid int, file, name string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s line in /proc/%d/%s", name, pid, file)
	return 0
}
