package ucm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Who may write to a file (ib_safe_file_access).
//
// The kernel refused a write unless the writer's credentials object was
// the one current at open (filp->f_cred == current_cred()). Threads share
// that object; fork(2) and execve(2) give the child, or the exec'd
// program, a new one. So a forked child or an exec'd program writing to an
// inherited fd got EACCES, and so did an opener that changed its
// credentials. CUSE tells us only the calling thread's id and its fsuid and
// fsgid, so ucmd checks two things:
//
//   - fsuid and fsgid equal the opener's (file.go: an opener that changed
//     credentials is refused, as in the kernel);
//   - the writing thread belongs to the opener's thread group (this file):
//     any other process is refused, whatever its credentials.
//
// The opener's thread group (TGID) is read once, at open, while the opener
// is blocked in open(2) and its thread id cannot be reused. A write from the
// opening thread or from the group leader (tid == tgid) needs nothing more.
// Another thread is looked up once, during its first write (it too is
// blocked in the call, so the answer is about that very thread), and the
// answer is cached in the file: every later command of that thread costs a
// map lookup, no system call.
//
// Thread id reuse. A cached answer is trusted for as long as the file stays
// open (or until the cache is reset, below), which is wrong only if that
// thread exits and the kernel hands its id to a new thread. Linux allocates
// ids cyclically (idr_alloc_cyclic up to kernel.pid_max), so that needs the
// whole id space to wrap while the file is open, and then:
//   - a cached "yes" for an exited thread of the opener (the opening thread
//     counts as one) lets a process that got its id and holds the fd write:
//     it still needs the opener's fsuid and fsgid, so it gets no more than
//     ucmd's uid/gid check allowed before;
//   - a cached "no" for a refused process refuses a new thread of the opener
//     that got its id: that needs another process to have written to the
//     file (misused the fd) first.
//
// We accept both rather than pay a lookup per command (a pidfd per thread
// would close the window, but PIDFD_THREAD needs Linux 6.9). The group
// leader's id is safe from reuse for as long as any thread of the group
// lives, and after the whole opener process is gone no thread can be "the
// opener" any more; a process that then gets the old TGID by wrapping the
// id space is again bounded by the uid/gid check.
//
// The cache holds at most maxWriterCache threads; past that it is emptied
// (the opener's two ids stay implicit), so memory stays bounded under a
// fork flood and each thread costs one lookup per reset.
//
// Differences from the kernel, all narrow: an execve by the opener itself
// (no fork) keeps the thread group, so ucmd lets the new program use the fd
// where the kernel refused it; a process that was handed the fd over a
// UNIX socket is refused as in the kernel. The exec is the gap the kernel's
// check was written for (CVE-2016-4565: a privileged program made to write
// to an fd its unprivileged caller opened, so that the driver copies into
// the privileged program's memory). A setuid or setgid program changes
// fsuid or fsgid and is refused here too; one that gains file capabilities
// or an SELinux domain without a new uid or gid is not. Refusing it would
// cost a system call per command (the process turns non-dumpable at such an
// exec, which an fstat of /proc/<tgid> shows as root's ownership), and such
// a program would have to write binary bytes of the attacker's choosing to
// the fd, beginning with the NUL bytes of a command number: text, however
// chosen, is refused as an unknown command (EINVAL). When the opener is not visible
// in ucmd's pid namespace (CUSE reports pid 0) or its group cannot be read,
// the file has no known thread group and only uid/gid are checked, as
// before; a writer with pid 0 on a file whose opener was visible is always
// another process (every thread of a group lives in one pid namespace) and
// is refused.

// ThreadGroupFunc returns the thread group id (TGID) of thread tid, both in
// ucmd's pid namespace.
type ThreadGroupFunc func(tid int) (tgid int, err error)

// ProcThreadGroup is the ThreadGroupFunc of the daemon: the Tgid line of
// /proc/<tid>/status (a thread's /proc directory exists, unlisted, under
// its own id).
func ProcThreadGroup(tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseTgid(b)
}

func parseTgid(status []byte) (int, error) {
	for len(status) > 0 {
		line := status
		if i := bytes.IndexByte(status, '\n'); i >= 0 {
			line, status = status[:i], status[i+1:]
		} else {
			status = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("bad Tgid line %q", line)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no Tgid line")
}

// ProcessNameFunc names a process: its comm, as ps shows it.
type ProcessNameFunc func(pid int) (string, error)

// ProcProcessName is the ProcessNameFunc of the daemon: /proc/PID/comm.
func ProcProcessName(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// printable is a process name as ucmd shows it: any process may name
// itself (PR_SET_NAME) with newlines, tabs or terminal escapes, which
// `ucmd status` and `ucmd trace` would print as rows or codes of their
// own in the operator's terminal. Bytes that are not printable UTF-8,
// and the backslash, become \xNN.
func printable(name string) string {
	clean := true
	for _, r := range name {
		if r == '\\' || r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		if r == '\\' || r == utf8.RuneError || !strconv.IsPrint(r) {
			for _, c := range []byte(name[i : i+n]) {
				fmt.Fprintf(&b, "\\x%02x", c)
			}
		} else {
			b.WriteString(name[i : i+n])
		}
		i += n
	}
	return b.String()
}

// process is the opener's process: its thread group, or the opening
// thread when the group is unknown.
func (w *writers) process() int {
	if w.tgid != 0 {
		return w.tgid
	}
	return w.opener
}

// maxWriterCache bounds the per-file cache of looked-up threads.
const maxWriterCache = 1024

// writers decides whether a thread may write to one file.
type writers struct {
	lookup ThreadGroupFunc
	opener int // the thread that opened the file
	tgid   int // its thread group; 0 = unknown: no thread check

	mu   sync.Mutex
	seen map[int]bool // thread → in the opener's group
}

// openWriters learns the opener's thread group; it runs during the open.
func (d *Device) openWriters(tid int) *writers {
	w := &writers{lookup: d.threadGroup, opener: tid}
	if tid <= 0 {
		return w
	}
	tgid, err := w.lookup(tid)
	if err != nil {
		// An opener killed during its open is gone: at most one Warn a
		// minute, as a client can do that in a loop.
		d.log.Log(context.Background(), d.credWarn.level(d.budget.now()),
			"ucm: cannot read the opener's thread group; only uid/gid will be checked on write",
			"pid", tid, "err", err, "note", "more of these are logged at debug level for a minute")
		return w
	}
	w.tgid = tgid
	return w
}

// check allows tid's write, or fails it with EACCES.
func (w *writers) check(tid int) error {
	if w.tgid == 0 || tid == w.opener || tid == w.tgid {
		return nil
	}
	if tid <= 0 {
		return fmt.Errorf("ucm: writer is not visible in our pid namespace, opener %d was: %w", w.tgid, unix.EACCES)
	}
	w.mu.Lock()
	ok, known := w.seen[tid]
	w.mu.Unlock()
	if !known {
		tgid, err := w.lookup(tid)
		if err != nil {
			// Not cached: a thread blocked in write(2) should be
			// there to look at.
			return fmt.Errorf("ucm: writer %d: thread group unknown (%v): %w", tid, err, unix.EACCES)
		}
		ok = tgid == w.tgid
		w.mu.Lock()
		if w.seen == nil || len(w.seen) >= maxWriterCache {
			w.seen = make(map[int]bool)
		}
		w.seen[tid] = ok
		w.mu.Unlock()
	}
	if !ok {
		return fmt.Errorf("ucm: writer %d is not a thread of the opener's process %d: %w", tid, w.tgid, unix.EACCES)
	}
	return nil
}
