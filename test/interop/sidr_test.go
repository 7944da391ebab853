//go:build interop

package interop

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
)

// rdma_cm's UDP port space resolves a UD peer with SIDR: service ID
// 0x1110000|port, the cma_hdr in the SIDR_REQ's private data, and the
// SIDR_REP must carry rdma_cm's Q_Key (RDMA_UDP_QKEY) or the kernel
// reports the peer unreachable.
const (
	rdmaUDPQKey  = 0x01234567
	portUDP      = 7491
	portUDPREJ   = 7492
	portOursUDP  = 7493
	portOursUDPR = 7494
)

func udpSID(port uint16) uint64 { return 0x0000000001110000 | uint64(port) }

type sidrEvent struct {
	status    uint8
	qkey, qpn uint32
	pd        []byte
}

// TestSIDR: SIDR both ways between cmcore and rdma_cm's UDP port space.
func TestSIDR(t *testing.T) {
	t.Run("OursToKernel", func(t *testing.T) {
		srv := runA(t, "userver", strconv.Itoa(portUDP), "accept", "kernel-sidr")
		srv.waitFor(t, wait, "listening")
		rej := runA(t, "userver", strconv.Itoa(portUDPREJ), "reject", "kernel-no")
		rej.waitFor(t, wait, "listening")
		s := startSide(t, nil)
		got := make(chan sidrEvent, 4)
		s.react = func(ev *cmcore.Event) error {
			if ev.Type == cmcore.EventSIDRREPReceived {
				got <- sidrEvent{ev.SIDRREP.Status, ev.SIDRREP.QKey, ev.SIDRREP.QPN, append([]byte(nil), ev.PrivateData...)}
			}
			return nil
		}
		resolve := func(port uint16) (sidrEvent, *cmcore.ID) {
			id := s.cm.CreateID(s.handle)
			t.Cleanup(func() { id.Destroy() })
			err := id.SendSIDRREQ(&cmcore.SIDRREQParams{
				Path: s.path(t, gidAv4), ServiceID: udpSID(port), TimeoutMs: 1000, MaxCMRetries: 3,
				PrivateData: cmaHdr(ipB, ipA, srcPortActive, "ours-sidr"),
			})
			if err != nil {
				t.Fatal(err)
			}
			s.wait(t, cmcore.EventSIDRREPReceived, wait)
			return <-got, id
		}
		e, id := resolve(portUDP)
		req := srv.waitFor(t, wait, "request peer=")
		if got, want := field(req, "peer"), ipB.String()+":"+strconv.Itoa(srcPortActive); got != want {
			t.Errorf("A saw peer %s, want %s (from our cma header)", got, want)
		}
		acc := srv.waitFor(t, wait, "accepted")
		if want := field(acc, "qpn"); e.status != wire.SIDRSuccess || e.qkey != rdmaUDPQKey || fmt.Sprint(e.qpn) != want {
			t.Errorf("SIDR_REP status %d Q_Key %#x QPN %d, want 0, %#x, A's UD QPN %s", e.status, e.qkey, e.qpn, uint32(rdmaUDPQKey), want)
		}
		if !bytes.HasPrefix(e.pd, []byte("kernel-sidr")) {
			t.Errorf("SIDR_REP private data %q", e.pd)
		}
		checkState(t, "after SIDR_REP", id, cmcore.StateIdle)

		e, _ = resolve(portUDPREJ)
		if e.status != wire.SIDRReject || !bytes.HasPrefix(e.pd, []byte("kernel-no")) {
			t.Errorf("rdma_reject: SIDR_REP status %d private data %q, want %d and %q", e.status, e.pd, wire.SIDRReject, "kernel-no")
		}
		rej.waitFor(t, wait, "rejected")

		// nobody listens: ib_cm answers SIDR_REP "unsupported" (cm_sidr_req_handler)
		e, _ = resolve(portUDP + 100)
		if e.status != wire.SIDRUnsupported {
			t.Errorf("no listener: SIDR_REP status %d, want %d (unsupported)", e.status, wire.SIDRUnsupported)
		}
	})
	t.Run("KernelToOurs", func(t *testing.T) {
		s := startSide(t, nil)
		const ourQPN = 0x00abcd
		var reqPD []byte
		s.react = func(ev *cmcore.Event) error {
			if ev.Type != cmcore.EventSIDRREQReceived {
				return nil
			}
			reqPD = append([]byte(nil), ev.PrivateData...)
			if ev.SIDRREQ.ServiceID == udpSID(portOursUDPR) {
				return ev.ID.SendSIDRREP(&cmcore.SIDRREPParams{Status: wire.SIDRReject, PrivateData: []byte("ours-no")})
			}
			return ev.ID.SendSIDRREP(&cmcore.SIDRREPParams{
				Status: wire.SIDRSuccess, QPN: ourQPN, QKey: rdmaUDPQKey, PrivateData: []byte("ours-sidr"),
			})
		}
		for _, port := range []uint16{portOursUDP, portOursUDPR} {
			l := s.cm.CreateID(s.handle)
			if err := l.Listen(udpSID(port), 0); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Destroy() })
		}
		cli := runA(t, "uclient", ipB.String(), strconv.Itoa(portOursUDP), "kernel-sidr")
		s.wait(t, cmcore.EventSIDRREQReceived, wait)
		ipver, src, dst, _, ok := parseCMAHdr(reqPD)
		if !ok || ipver != 4 || src != ipA || dst != ipB || !bytes.HasPrefix(reqPD[cmaHdrSize:], []byte("kernel-sidr")) {
			t.Errorf("SIDR_REQ private data % x", reqPD)
		}
		line := cli.waitFor(t, wait, "resolved")
		if field(line, "qpn") != fmt.Sprint(ourQPN) || field(line, "qkey") != fmt.Sprintf("%#x", rdmaUDPQKey) {
			t.Errorf("A: %q, want qpn %d qkey %#x", line, ourQPN, rdmaUDPQKey)
		}
		if rc, out := cli.waitExit(t, wait); rc != 0 || !strings.Contains(out, "pd="+hexPD("ours-sidr")) {
			t.Errorf("A's uclient exit status %d, want 0 and our private data:\n%s", rc, out)
		}

		cli = runA(t, "uclient", ipB.String(), strconv.Itoa(portOursUDPR), "kernel-sidr")
		s.wait(t, cmcore.EventSIDRREQReceived, wait)
		line = cli.waitFor(t, wait, "unresolved")
		if !strings.Contains(line, "UNREACHABLE") {
			t.Errorf("A after our SIDR reject: %q, want UNREACHABLE", line)
		}
		cli.waitExit(t, wait)
	})
}
