package ucm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/syncbuf"
)

// The failed-command log is a token bucket per device: a burst, then one
// line per interval, and the lines held back are reported with the next
// one that passes; every failure is counted by errno whatever the log.
func TestFailuresRateLimit(t *testing.T) {
	var buf syncbuf.Buffer
	fl := newFailures(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	now := time.Unix(1000, 0)
	fl.now = func() time.Time { return now }
	f := &file{pid: 77, comm: "dapltest"}
	err := fmt.Errorf("ucm: LISTEN: cmcore: listen in state LISTEN: %w", unix.EINVAL)
	ctx := context.Background()
	for range failLogBurst + 5 {
		fl.record(ctx, f, 78, "LISTEN", 3, true, err)
	}
	out := buf.String()
	if n := strings.Count(out, "command failed"); n != failLogBurst {
		t.Fatalf("%d lines in the burst, want %d:\n%s", n, failLogBurst, out)
	}
	line := strings.SplitN(out, "\n", 2)[0]
	for _, want := range []string{"cmd=LISTEN", "errno=EINVAL", "pid=77", "comm=dapltest", "thread=78", "id=3",
		`err="ucm: LISTEN: cmcore: listen in state LISTEN: invalid argument"`} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
	now = now.Add(failLogInterval)
	fl.record(ctx, f, 77, "DESTROY_ID", 0, false, fmt.Errorf("ucm: no id: %w", unix.ENOENT))
	out = buf.String()
	if !strings.Contains(out, "failed-command messages suppressed") || !strings.Contains(out, "suppressed=5") {
		t.Errorf("no suppressed count:\n%s", out)
	}
	last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
	if !strings.Contains(last, "errno=ENOENT") || strings.Contains(last, "thread=") || strings.Contains(last, " id=") {
		t.Errorf("last line: %s", last)
	}
	got := fl.snapshot()
	if len(got) != 2 || got["EINVAL"] != failLogBurst+5 || got["ENOENT"] != 1 {
		t.Errorf("counts %v", got)
	}
}

// Without debug logging nothing is formatted and nothing is suppressed,
// but failures still count; a cancelled call counts as EINTR, an error
// without an errno as EIO, as cuse answers them.
func TestFailuresQuiet(t *testing.T) {
	var buf syncbuf.Buffer
	fl := newFailures(slog.New(slog.NewTextHandler(&buf, nil)))
	f := &file{pid: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fl.record(ctx, f, 1, "GET_EVENT", 0, false, fmt.Errorf("ucm: wait: %w", context.Canceled))
	fl.record(context.Background(), f, 1, "REQ", 0, true, fmt.Errorf("odd"))
	fl.record(context.Background(), f, 1, "REQ", 0, true, unix.EAGAIN)
	if buf.String() != "" || fl.suppressed != 0 {
		t.Errorf("logged at info level: %q (suppressed %d)", buf.String(), fl.suppressed)
	}
	if got := fl.snapshot(); got["EINTR"] != 1 || got["EIO"] != 1 || got["EAGAIN"] != 1 {
		t.Errorf("counts %v", got)
	}
	if newFailures(slog.New(slog.DiscardHandler)).snapshot() != nil {
		t.Error("no failures, yet counts")
	}
}
