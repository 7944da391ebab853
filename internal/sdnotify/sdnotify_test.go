package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestNotify(t *testing.T) {
	if sent, err := notify("", Ready); sent || err != nil {
		t.Fatalf("no NOTIFY_SOCKET: sent=%v err=%v", sent, err)
	}
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@ucmd-sdnotify-test-" + time.Now().Format("150405.000000000")} {
		addr := &net.UnixAddr{Name: name, Net: "unixgram"}
		if name[0] == '@' {
			addr.Name = "\x00" + name[1:]
		}
		l, err := net.ListenUnixgram("unixgram", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", name)
		if sent, err := Notify(Ready + "\nSTATUS=serving 2 nodes"); !sent || err != nil {
			t.Fatalf("%s: sent=%v err=%v", name, sent, err)
		}
		buf := make([]byte, 256)
		l.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := l.Read(buf)
		if err != nil || string(buf[:n]) != "READY=1\nSTATUS=serving 2 nodes" {
			t.Fatalf("%s: got %q, %v", name, buf[:n], err)
		}
		l.Close()
	}
	if _, err := notify("relative", Ready); err == nil {
		t.Error("a relative NOTIFY_SOCKET accepted")
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		ok, err   bool
	}{
		{usec: "", want: 0},
		{usec: "60000000", want: time.Minute, ok: true},
		{usec: "60000000", pid: "42", want: time.Minute, ok: true},
		{usec: "60000000", pid: "43"}, // inherited from another service's process
		{usec: "60000000", pid: "x", err: true},
		{usec: "0", err: true},
		{usec: "-5", err: true},
		{usec: "1s", err: true},
		{usec: "99999999999999999999", err: true},
	} {
		d, ok, err := watchdogInterval(c.usec, c.pid, 42)
		if d != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, %v, %v; want %v, %v, error %v", c.usec, c.pid, d, ok, err, c.want, c.ok, c.err)
		}
	}
}
