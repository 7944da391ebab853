package ucm

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseTgid(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t123\nNgid:\t0\nPid:\t124\n", 123, true},
		{"Tgid:  7", 7, true},
		{"Name:\tTgid: 9\nPid:\t3\n", 0, false}, // the comm is no Tgid line
		{"Tgid:\t-1\n", 0, false},
		{"Tgid:\tx\n", 0, false},
		{"", 0, false},
	} {
		got, err := parseTgid([]byte(c.in))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseTgid(%q) = %d, %v; want %d (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

// ProcThreadGroup on the host: our process and another of our threads.
func TestProcThreadGroup(t *testing.T) {
	pid := os.Getpid()
	if g, err := ProcThreadGroup(pid); err != nil || g != pid {
		t.Fatalf("ProcThreadGroup(self %d) = %d, %v", pid, g, err)
	}
	done := make(chan [2]int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := unix.Gettid()
		g, err := ProcThreadGroup(tid)
		if err != nil {
			g = -1
		}
		done <- [2]int{tid, g}
	}()
	r := <-done
	if r[1] != pid {
		t.Errorf("ProcThreadGroup(thread %d) = %d, want %d", r[0], r[1], pid)
	}
	if _, err := ProcThreadGroup(1 << 30); err == nil {
		t.Error("ProcThreadGroup of a pid above pid_max succeeded")
	}
}

// The per-file cache stays bounded under a flood of writers, and keeps
// answering correctly after it is reset.
func TestWriterCacheBounded(t *testing.T) {
	lookups := 0
	w := &writers{opener: 10, tgid: 10, lookup: func(tid int) (int, error) {
		lookups++
		if tid < 100 {
			return 10, nil
		}
		return tid, nil
	}}
	if err := w.check(11); err != nil {
		t.Fatal(err)
	}
	for tid := 100; tid < 100+3*maxWriterCache; tid++ {
		if err := w.check(tid); err == nil {
			t.Fatalf("writer %d allowed", tid)
		}
		if len(w.seen) > maxWriterCache {
			t.Fatalf("cache holds %d threads", len(w.seen))
		}
	}
	if err := w.check(11); err != nil {
		t.Errorf("thread 11 after resets: %v", err)
	}
	if err := w.check(10); err != nil {
		t.Errorf("the opener: %v", err)
	}
	if want := 1 + 3*maxWriterCache + 1; lookups != want {
		t.Errorf("%d lookups, want %d", lookups, want)
	}
}

// A process names itself as it likes (PR_SET_NAME, 15 bytes): what ucmd
// keeps, and `ucmd status` and `ucmd trace` print, has its control bytes,
// invalid UTF-8 and backslashes escaped, so that a name cannot add a
// forged row to the status table or send escapes to a terminal.
func TestProcessNamePrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ibv_rc_pingpong", "ibv_rc_pingpong"},
		{"ünïcode", "ünïcode"},
		{"a\nrxe0\t1\t0\tsshd", `a\x0arxe0\x091\x090\x09sshd`},
		{"\x1b[2Jx", `\x1b[2Jx`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`a\x0ab`, `a\x5cx0ab`},
		{"del\x7f", `del\x7f`},
	} {
		if got := printable(c.in); got != c.want {
			t.Errorf("printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}

	d, _, _ := openDirect(t, Config{ProcessName: func(int) (string, error) { return "a\nrxe0\t1\t0\tsshd", nil }})
	if files := d.Files(); len(files) != 1 || files[0].Comm != `a\x0arxe0\x091\x090\x09sshd` {
		t.Errorf("files %+v, want one whose process name is escaped", files)
	}
}
