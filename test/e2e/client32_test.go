//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 12 point 8: a 32-bit client (static i386 ucmclient, no verbs) over
// ucmd on rxe0/rxe1. The ABI carries its 32-bit pointers zero-extended in
// u64 fields; every command, response and event of the raw ABI path goes
// through them: CREATE_ID, LISTEN, SEND_REQ (path and private data
// pointers), GET_EVENT (response, data, info), INIT_QP_ATTR, SEND_REP,
// SEND_RTU, DREQ/DREP, DESTROY_ID with events_reported.
func TestDaemon32BitClient(t *testing.T) {
	bin32 := ucmclient32Bin(t)
	if bin32 == "" {
		t.Fatal("make e2e builds the 32-bit client (UCMCLIENT32_BIN); run through make e2e")
	}
	bin64 := ucmclientBin(t)
	d := startDaemon(t)
	const local, remote = "fe80::ff:fe00:1", "fe80::ff:fe00:2" // rxe0, rxe1 (test/vm/README.md)
	srvArgs := func(n string) []string { return []string{"-d", "rxe1", "--no-verbs", "-n", n, "-w", "0"} }
	cliArgs := func(extra ...string) []string {
		return append([]string{"-d", "rxe0", "--no-verbs", "-G", local, "-g", remote, "-w", "0"}, extra...)
	}
	for _, c := range []struct {
		name     string
		srv, cli string
		sid      string
		srvN     string
		cliExtra []string
	}{
		{"32-bit both, 20 in sequence", bin32, bin32, "0x3001", "20", []string{"-n", "20"}},
		{"32-bit both, 8 at once", bin32, bin32, "0x3002", "8", []string{"-n", "1", "-P", "8"}},
		{"32-bit both, O_NONBLOCK", bin32, bin32, "0x3003", "4", []string{"-n", "4", "--nonblock"}},
		{"32-bit server, 64-bit client", bin32, bin64, "0x3004", "4", []string{"-n", "4"}},
		{"64-bit server, 32-bit client", bin64, bin32, "0x3005", "4", []string{"-n", "4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := pairWith(t, d, c.sid, c.srv, srvArgs(c.srvN), c.cli, cliArgs(c.cliExtra...))
			if !strings.Contains(cli, "connections ok") || !strings.Contains(srv, "connections ok") {
				t.Errorf("no result lines:\nserver:\n%s\nclient:\n%s", srv, cli)
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("server:\n%s\nclient:\n%s", srv, cli)
			}
		})
	}
	d.wantNoFiles(t)
}

// pairWith is clientPair with a binary per side: a server on ucm1 (rxe1)
// and a client on ucm0 (rxe0), both under `ucmd exec` (libibcm discovery).
func pairWith(t *testing.T, d *daemon, sid, srvBin string, srvArgs []string, cliBin string, cliArgs []string) (string, string) {
	t.Helper()
	srv := exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", srvBin, "-l", sid}, srvArgs...)...)
	var sb syncBuffer
	srv.Stdout, srv.Stderr = &sb, &sb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	d.waitListening(t, 1)
	out, cerr := exec.Command(ucmdBin(t), append([]string{"exec", "--runtime-dir", d.run, "--", cliBin, "-c", "-s", sid}, cliArgs...)...).CombinedOutput()
	var serr error
	select {
	case serr = <-done:
	case <-time.After(60 * time.Second):
		srv.Process.Kill()
		serr = <-done
		t.Errorf("server did not finish")
	}
	if cerr != nil || serr != nil {
		t.Errorf("client: %v\n%s\nserver: %v\n%s", cerr, out, serr, sb.String())
	}
	return sb.String(), string(out)
}
