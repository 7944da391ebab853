package daemon_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/daemon/daemontest"
)

// pair is two clients of a running daemon's first node: srv with an id
// listening on service id 0x5151, and cli, which connects to it over the
// port's loopback path.
type pair struct {
	srv, cli *conformance.Client
	listener uint32
	path     abi.PathRec
}

// newPair opens the two clients on infiniband/ucm0 of the daemon whose
// runtime directory is run; they are closed when the test ends.
func newPair(t testing.TB, f *daemontest.Fake, run string) *pair {
	t.Helper()
	return newPairOn(t, f, run, 0)
}

// newPairOn is newPair on infiniband/ucm<node>.
func newPairOn(t testing.TB, f *daemontest.Fake, run string, node int) *pair {
	t.Helper()
	var gid net.IP
	for _, d := range fetch(t, run).Devices {
		if d.Node == filepath.Join(f.DevDir, fmt.Sprintf("infiniband/ucm%d", node)) {
			gid = net.ParseIP(d.Ports[0].GID0).To16()
		}
	}
	if gid == nil {
		t.Fatalf("no ucm%d in the status", node)
	}
	p := &pair{path: conformance.LoopbackPath([16]byte(gid), 0)}
	dut, err := f.DUT(fmt.Sprintf("infiniband/ucm%d", node), &p.path)
	must(t, err)
	p.srv, err = conformance.NewClient(dut, false)
	must(t, err)
	t.Cleanup(func() { p.srv.Close() })
	p.cli, err = conformance.NewClient(dut, false)
	must(t, err)
	t.Cleanup(func() { p.cli.Close() })
	p.listener, err = p.srv.CreateID(1)
	must(t, err)
	must(t, p.srv.Listen(p.listener, 0x5151, 0))
	return p
}

// req sends a REQ from a new id of cli (cookie 2) and returns that id
// and the REQ_RECEIVED event on srv.
func (p *pair) req(t *testing.T) (uint32, conformance.Event) {
	t.Helper()
	id, err := p.cli.CreateID(2)
	must(t, err)
	must(t, p.cli.SendREQ(p.cli.REQ(id, 0x5151, p.path, 0x100)))
	ev, err := p.srv.Expect(abi.CMREQReceived, waitFor)
	must(t, err)
	return id, ev
}

// reject sends a REQ that srv rejects (reason 28) and waits for the REJ.
func (p *pair) reject(t *testing.T) {
	t.Helper()
	_, ev := p.req(t)
	must(t, p.srv.SendInfo(abi.CmdSendREJ, ev.ID, 28, nil, nil))
	if _, err := p.cli.Expect(abi.CMREJReceived, waitFor); err != nil {
		t.Fatal(err)
	}
}
