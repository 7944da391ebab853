package daemon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
	"github.com/ucmd/ucmd/internal/status"
	"github.com/ucmd/ucmd/ucm"
)

// Status on the fake machine: a file's pid is the opener's process (not
// its thread) with its name, each id has its port, state and service id,
// the JSON carries the service id as a hex string, filters select, and
// the text is one aligned table row per id.
func TestStatusIDs(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	start(t, f, daemon.Config{SimDevices: 2, RuntimeDir: run, Version: "test"})
	c := client(t, f, "infiniband/ucm0")
	const sid = 0x0100000000abcdef // above 2^53: a JSON number would lose it
	id, err := c.CreateID(7)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(id, sid, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateID(8); err != nil {
		t.Fatal(err)
	}
	// A failed command: counted by errno on its device (issue 15.3).
	if err := c.Listen(id, sid, 0); conformance.Errno(err) != unix.EINVAL {
		t.Fatalf("second listen: %v", err)
	}

	snap := fetch(t, run)
	if got := snap.Devices[0].Errors; len(got) != 1 || got["EINVAL"] != 1 || snap.Devices[1].Errors != nil {
		t.Errorf("errors: %v, %v", got, snap.Devices[1].Errors)
	}
	fl := snap.Devices[0].Files
	if len(fl) != 1 || fl[0].PID != daemontest.Tgid || fl[0].Comm != daemontest.ProcessName || len(fl[0].IDs) != 2 {
		t.Fatalf("files: %+v", fl)
	}
	if got := fl[0].IDs[0]; got.ID != id || got.State != "LISTEN" || got.ServiceID != sid {
		t.Errorf("listening id: %+v", got)
	}

	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"service_id":"0x0100000000abcdef"`) || !strings.Contains(string(b), `"errors":{"EINVAL":1}`) {
		t.Errorf("JSON service id: %s", b)
	}

	filt, err := status.ParseFilter([]string{"dev", "ucm0", "state", "listen", "pid", strconv.Itoa(daemontest.Tgid)})
	if err != nil {
		t.Fatal(err)
	}
	sel := filt.Apply(snap)
	if len(sel.Devices) != 1 || len(sel.Devices[0].Files) != 1 || len(sel.Devices[0].Files[0].IDs) != 1 {
		t.Fatalf("filtered: %+v", sel)
	}

	var text bytes.Buffer
	if err := status.WriteText(&text, snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("ucmd status:\n%s", text.String())
	if !strings.Contains(text.String(), "EINVAL=1") {
		t.Error("text lacks the failed command")
	}
	blocks := strings.Split(text.String(), "\n\n")
	ids := strings.Split(strings.TrimRight(blocks[len(blocks)-1], "\n"), "\n")
	if len(ids) != 3 || !strings.HasPrefix(ids[0], "DEV") {
		t.Fatalf("id table:\n%s", blocks[len(blocks)-1])
	}
	col := strings.Index(ids[0], "STATE")
	for _, l := range ids[1:] {
		if !strings.Contains(l, daemontest.ProcessName) || !strings.HasPrefix(l[col:], "LISTEN") && !strings.HasPrefix(l[col:], "IDLE") {
			t.Errorf("id line %q: no process name, or STATE not under its header", l)
		}
	}
}

// Status shows the limits across every device: each file's uid, what the
// uid holds over both devices, the memory charged against the budget, and
// a refusal counted by the limit's flag name, in the JSON and the text.
func TestStatusLimits(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	start(t, f, daemon.Config{SimDevices: 2, RuntimeDir: run, Limits: ucm.Limits{UserIDs: 2, MemoryBudget: 1 << 20}})
	var clients []*conformance.Client
	for _, node := range []string{"infiniband/ucm0", "infiniband/ucm1"} {
		c := client(t, f, node)
		if _, err := c.CreateID(0); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	if _, err := clients[0].CreateID(0); conformance.Errno(err) != unix.ENOMEM {
		t.Fatalf("third CREATE_ID of the user, past --user-ids 2: %v", err)
	}

	snap := fetch(t, run)
	l := snap.Limits
	if l.MemoryBudget != 1<<20 || l.MemoryCharged <= 0 || l.MemoryCharged >= 1<<20 || l.Copies != 0 || l.CopiesMax != ucm.DefaultCopies {
		t.Errorf("memory charged %d of %d, want some of 1 MiB; copies %d of %d, want none of %d", l.MemoryCharged, l.MemoryBudget, l.Copies, l.CopiesMax, ucm.DefaultCopies)
	}
	wantUser := status.User{UID: 1000, Files: 2, IDs: 2, Memory: l.MemoryCharged} // the only user
	if len(l.Users) != 1 || l.Users[0] != wantUser {
		t.Errorf("users %+v, want [%+v]", l.Users, wantUser)
	}
	if len(l.Refused) != 1 || l.Refused["user-ids"] != 1 {
		t.Errorf("refused %v, want user-ids 1", l.Refused)
	}
	for _, d := range snap.Devices {
		if len(d.Files) != 1 || d.Files[0].UID != 1000 {
			t.Errorf("%s's files %+v, want one of uid 1000", d.Name, d.Files)
		}
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"refused":{"user-ids":1}`, `"users":[{"uid":1000,"files":2,"ids":2,`, `"memory_budget":1048576`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var text bytes.Buffer
	if err := status.WriteText(&text, snap); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\n[0-9.]+KiB +1\.0MiB +0/1024 +1 +user-ids=1\n`).MatchString(text.String()) {
		t.Errorf("text lacks the budget and the refusal:\n%s", text.String())
	}
}

// --status-group: the socket is 0660 and the group's; an unknown group is
// refused before anything starts.
func TestStatusGroup(t *testing.T) {
	f := daemontest.New(t)
	run := t.TempDir()
	gid := os.Getgid()
	start(t, f, daemon.Config{SimDevices: 1, RuntimeDir: run, StatusGroup: strconv.Itoa(gid)})
	fi, err := os.Stat(filepath.Join(run, status.SocketName))
	if err != nil || fi.Mode().Perm() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Fatalf("socket: %v %+v %v", fi.Mode(), fi.Sys(), err)
	}
	fetch(t, run)

	f2 := daemontest.New(t)
	cfg := f2.Config(daemon.Config{Fabric: daemon.FabricSim, SimDevices: 1, RuntimeDir: t.TempDir(), StatusGroup: "no-such-group-ucmd", Logger: quiet()})
	if d, err := daemon.Start(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "--status-group") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("unknown group: %v", err)
	}
}

// A port whose reads fail, as a removed device's umad file does, shows as
// STOPPED with the reason in the JSON; the other device keeps running.
func TestStatusPortStopped(t *testing.T) {
	f := daemontest.New(t)
	d := start(t, f, daemon.Config{SimDevices: 2})
	eio := errors.New("read /dev/infiniband/umad0: input/output error")
	d.SimFabric().Devices()[0].Port(1).FailReceive(eio)
	var snap status.Snapshot
	for deadline := time.Now().Add(waitFor); ; time.Sleep(time.Millisecond) {
		snap = d.Snapshot()
		if snap.Devices[0].Ports[0].State == "STOPPED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port state %q after its reads failed", snap.Devices[0].Ports[0].State)
		}
	}
	if p := snap.Devices[0].Ports[0]; snap.Devices[0].Name != "sim0" || p.ReceiveError != eio.Error() {
		t.Errorf("%s port: %+v", snap.Devices[0].Name, p)
	}
	if p := snap.Devices[1].Ports[0]; p.State != "ACTIVE" || p.ReceiveError != "" {
		t.Errorf("the other device's port: %+v", p)
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"receive_error":"read /dev/infiniband/umad0: input/output error"`) {
		t.Errorf("JSON lacks the receive error: %s", b)
	}
	var text bytes.Buffer
	if err := status.WriteText(&text, snap); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "STOPPED") {
		t.Errorf("text lacks the stopped port:\n%s", text.String())
	}
}
