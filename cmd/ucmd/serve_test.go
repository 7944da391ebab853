package main

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/ucmd/ucmd/internal/daemon"
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
	return f.config(&globalFlags{})
}

// The limit flags reach the daemon's ucm.Limits; negative ones are refused.
func TestServeLimitFlags(t *testing.T) {
	parse := func(args ...string) (ucm.Limits, error) {
		cfg, err := serveConfig(t, args...)
		return cfg.Limits, err
	}
	l, err := parse("--max-ids", "10", "--max-events", "11", "--user-ids", "12", "--user-events", "13",
		"--user-files", "14", "--memory-budget", "15000000")
	if err != nil {
		t.Fatal(err)
	}
	want := ucm.Limits{MaxIDs: 10, MaxEvents: 11, UserIDs: 12, UserEvents: 13, UserFiles: 14, MemoryBudget: 15000000}
	if l != want {
		t.Errorf("limits %+v, want %+v", l, want)
	}
	if l, err := parse(); err != nil || l != (ucm.Limits{}) {
		t.Errorf("no flags: %+v, %v; want zero limits (the defaults)", l, err)
	}
	for _, flag := range []string{"--user-ids", "--user-events", "--user-files", "--memory-budget"} {
		if _, err := parse(flag, "-1"); err == nil {
			t.Errorf("%s -1 accepted", flag)
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

func TestSpareProcs(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	procs, raised := spareProcs(base, 6)
	if !raised || procs != base+6 || runtime.GOMAXPROCS(0) != base+6 {
		t.Fatalf("spareProcs(%d, 6) = %d, %v with GOMAXPROCS now %d; want %d, true", base, procs, raised, runtime.GOMAXPROCS(0), base+6)
	}
	// A device gone: its readers' Ps are given back.
	if procs, _ := spareProcs(base, 2); procs != base+2 || runtime.GOMAXPROCS(0) != base+2 {
		t.Fatalf("spareProcs(%d, 2) after 6 = %d with GOMAXPROCS now %d; want %d", base, procs, runtime.GOMAXPROCS(0), base+2)
	}
	runtime.GOMAXPROCS(base)
	t.Setenv("GOMAXPROCS", strconv.Itoa(base)) // the operator's choice stands
	if _, raised := spareProcs(base, 6); raised || runtime.GOMAXPROCS(0) != base {
		t.Fatalf("spareProcs with GOMAXPROCS set raised it to %d", runtime.GOMAXPROCS(0))
	}
}
