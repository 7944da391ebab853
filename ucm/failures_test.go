package ucm_test

import (
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/internal/syncbuf"
)

// A failed command through the device: the client gets the errno it always
// got, the debug log names the command, id, process, errno and the cause
// chain, and the device counts it by errno; a command that succeeds logs
// nothing.
func TestFailedCommandLogged(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &fakedut.Options{Logger: log})
	if s := buf.String(); strings.Contains(s, "command failed") {
		t.Fatalf("successful commands logged:\n%s", s)
	}
	// A second LISTEN on the listener: EINVAL from cmcore.
	err := e.b.Listen(e.listener, e.sid, 0)
	wantErrno(t, "second listen", err, unix.EINVAL)
	const noSuchID = 0x7fff0000
	_, err = e.a.DestroyID(noSuchID)
	errno := conformance.Errno(err)
	if errno == 0 {
		t.Fatalf("destroy of no id: %v", err)
	}

	out := buf.String()
	t.Logf("log:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines:\n%s", out)
	}
	for _, want := range []string{"cmd=LISTEN", "errno=EINVAL", "pid=4242", "comm=fakedut", "id=", "err=\"ucm: LISTEN: cmcore: listen in state LISTEN"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line lacks %s: %s", want, lines[0])
		}
	}
	if !strings.Contains(lines[1], "cmd=DESTROY_ID") || !strings.Contains(lines[1], "errno="+unix.ErrnoName(errno)) {
		t.Errorf("destroy line: %s", lines[1])
	}
	got := e.d.Device.Errors()
	if got["EINVAL"] != 1 || got[unix.ErrnoName(errno)] != 1 {
		t.Errorf("errors %v", got)
	}
}
