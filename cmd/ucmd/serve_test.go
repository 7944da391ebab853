package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/sysmon"
	"github.com/ucmd/ucmd/ucm"
)

// serveConfig parses serve's flags from args into the daemon's Config.
func serveConfig(t *testing.T, args ...string) (daemon.Config, error) {
	t.Helper()
	var f serveFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.config(&globalFlags{}, io.Discard)
}

// The limit flags reach the daemon's ucm.Limits; negative ones are refused.
func TestServeLimitFlags(t *testing.T) {
	parse := func(args ...string) (ucm.Limits, error) {
		cfg, err := serveConfig(t, args...)
		return cfg.Limits, err
	}
	l, err := parse("--max-ids", "10", "--max-events", "11", "--user-ids", "12", "--user-events", "13",
		"--user-files", "14", "--user-waits", "16", "--user-copies", "17", "--copies", "18", "--memory-budget", "15000000")
	if err != nil {
		t.Fatal(err)
	}
	want := ucm.Limits{MaxIDs: 10, MaxEvents: 11, UserIDs: 12, UserEvents: 13, UserFiles: 14, UserWaits: 16,
		UserCopies: 17, Copies: 18, MemoryBudget: 15000000}
	if l != want {
		t.Errorf("limits %+v, want %+v", l, want)
	}
	if l, err := parse(); err != nil || l != (ucm.Limits{}) {
		t.Errorf("no flags: %+v, %v; want zero limits (the defaults)", l, err)
	}
	for _, flag := range []string{"--max-ids", "--max-events", "--user-ids", "--user-events", "--user-files", "--user-waits", "--user-copies", "--copies", "--memory-budget"} {
		if _, err := parse(flag, "-1"); err == nil || !strings.Contains(err.Error(), flag+" -1") {
			t.Errorf("%s -1: %v, want an error naming it", flag, err)
		}
	}
	// A budget too small for one client is a unit forgotten.
	if _, err := parse("--memory-budget", "512"); err == nil || !strings.Contains(err.Error(), "--memory-budget 512: in bytes, at least 1048576 (1 MiB); 512 MiB would be 536870912") {
		t.Errorf("--memory-budget 512: %v, want an error saying it is bytes", err)
	}
	if _, err := parse("--memory-budget", "1048576"); err != nil {
		t.Errorf("--memory-budget 1048576: %v", err)
	}
	// More copies than threads the runtime allows are refused too.
	for _, flag := range []string{"--user-copies", "--copies"} {
		if _, err := parse(flag, "8193"); err == nil || !strings.Contains(err.Error(), flag+" 8193: at most 8192") {
			t.Errorf("%s 8193: %v, want an error naming it and the bound", flag, err)
		}
		if _, err := parse(flag, "8192"); err != nil {
			t.Errorf("%s 8192: %v", flag, err)
		}
	}
}

// --auto-mra reaches the daemon's Config.AutoMRA (every CM's
// cmcore.Options.AutoMRA); it is off by default.
func TestServeAutoMRAFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want uint8
	}{{nil, 0}, {[]string{"--auto-mra", "24"}, 24}, {[]string{"--auto-mra", "31"}, 31}} {
		cfg, err := serveConfig(t, tc.args...)
		if err != nil || cfg.AutoMRA != tc.want {
			t.Errorf("%v: AutoMRA %d, %v; want %d", tc.args, cfg.AutoMRA, err, tc.want)
		}
	}
}

// --metrics-listen reaches the daemon's Config.MetricsListen; it is off
// by default.
func TestServeMetricsListenFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, ""}, {[]string{"--metrics-listen", "127.0.0.1:0"}, "127.0.0.1:0"}, {[]string{"--metrics-listen", "[::1]:9435"}, "[::1]:9435"}} {
		cfg, err := serveConfig(t, tc.args...)
		if err != nil || cfg.MetricsListen != tc.want {
			t.Errorf("%v: MetricsListen %q, %v; want %q", tc.args, cfg.MetricsListen, err, tc.want)
		}
	}
}

func TestServeRescan(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 2 * time.Second}, {[]string{"--rescan", "0"}, 0}, {[]string{"--rescan", "500ms"}, 500 * time.Millisecond}} {
		cfg, err := serveConfig(t, tc.args...)
		if err != nil || cfg.Rescan != tc.want {
			t.Errorf("%v: Rescan %v, %v; want %v", tc.args, cfg.Rescan, err, tc.want)
		}
	}
}

// --monitor-slack defaults to sysmon.DefaultSlack; a negative slack, or one
// past a second, is refused.
func TestServeMonitorSlackFlag(t *testing.T) {
	var f serveFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(nil); err != nil || f.monitorSlack != sysmon.DefaultSlack {
		t.Fatalf("default --monitor-slack %v, %v; want %v", f.monitorSlack, err, sysmon.DefaultSlack)
	}
	for _, ok := range []string{"0", "1ms", "1s"} {
		if _, err := serveConfig(t, "--monitor-slack", ok); err != nil {
			t.Errorf("--monitor-slack %s: %v", ok, err)
		}
	}
	for _, bad := range []string{"-1ms", "2s"} {
		if _, err := serveConfig(t, "--monitor-slack", bad); err == nil {
			t.Errorf("--monitor-slack %s accepted", bad)
		}
	}
}

// Logging to the journal's stream (JOURNAL_STREAM names stderr), text
// lines carry their priority and no time; to anything else, time and no
// prefix; JSON lines keep their time either way.
func TestServeLoggerJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		journal bool
		args    []string
		want    *regexp.Regexp
	}{
		{true, nil, regexp.MustCompile(`^<4>level=WARN msg=hello dev=rxe0\n$`)},
		{false, nil, regexp.MustCompile(`^time=\S+ level=WARN msg=hello dev=rxe0\n$`)},
		{true, []string{"--log-json"}, regexp.MustCompile(`^<4>\{"time":"[^"]+","level":"WARN","msg":"hello","dev":"rxe0"\}\n$`)},
	} {
		env := ""
		if tc.journal {
			env = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
		}
		t.Setenv("JOURNAL_STREAM", env)
		var sf serveFlags
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		sf.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		log, err := sf.logger(f)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("hello", "dev", "rxe0")
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !tc.want.Match(b) {
			t.Errorf("journal %v, %v: logged %q, want %v", tc.journal, tc.args, b, tc.want)
		}
	}
}
