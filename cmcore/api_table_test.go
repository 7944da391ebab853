package cmcore

import (
	"errors"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/cmcore/wire"
	"golang.org/x/sys/unix"
)

// apiCall is one column of ib-cm.md §3.2: a call, the states it is allowed
// in with the state it leaves and the message it sends, and the errno for
// every other state.
type apiCall struct {
	name    string
	do      func(h *harness, id *ID) error
	allowed map[string]apiOK
	errno   map[string]unix.Errno // non-EINVAL errors by state
	event   EventType             // queued on success, if hasEvent
	hasEv   bool
}

type apiOK struct {
	after string // reach name; only the State is compared unless it has a "/"
	sent  uint16 // attribute ID of the MAD sent, 0 for none
}

var established = []string{"ESTABLISHED", "ESTABLISHED/passive", "ESTABLISHED/LAP_SENT", "ESTABLISHED/MRA_LAP_RCVD", "ESTABLISHED/LAP_RCVD", "ESTABLISHED/MRA_LAP_SENT", "ESTABLISHED/LAP_IDLE"}

func allowIn(states []string, ok apiOK) map[string]apiOK {
	m := make(map[string]apiOK)
	for _, s := range states {
		m[s] = ok
	}
	return m
}

func altPath() *PathRecord {
	p := testPath()
	p.SLID, p.DLID = 3, 4
	return p
}

var apiCalls = []apiCall{
	{name: "Listen", do: func(h *harness, id *ID) error { return id.Listen(0x5555, 0) },
		allowed: allowIn([]string{"IDLE"}, apiOK{"LISTEN", 0})},
	{name: "SendREQ", do: func(h *harness, id *ID) error { return id.SendREQ(testREQParams()) },
		allowed: allowIn([]string{"IDLE"}, apiOK{"REQ_SENT", wire.AttrREQ})},
	{name: "SendREP", do: func(h *harness, id *ID) error { return id.SendREP(&REPParams{QPN: 7}) },
		allowed: allowIn([]string{"REQ_RCVD", "MRA_REQ_SENT"}, apiOK{"REP_SENT", wire.AttrREP})},
	{name: "SendRTU", do: func(h *harness, id *ID) error { return id.SendRTU(nil) },
		allowed: allowIn([]string{"REP_RCVD", "MRA_REP_SENT"}, apiOK{"ESTABLISHED", wire.AttrRTU})},
	{name: "SendDREQ", do: func(h *harness, id *ID) error { return id.SendDREQ(nil) },
		allowed: allowIn(established, apiOK{"DREQ_SENT", wire.AttrDREQ})},
	{name: "SendDREP", do: func(h *harness, id *ID) error { return id.SendDREP(nil) },
		allowed: allowIn([]string{"DREQ_RCVD"}, apiOK{"TIMEWAIT", wire.AttrDREP})},
	{name: "SendREJ", do: func(h *harness, id *ID) error { return id.SendREJ(wire.REJConsumerDefined, nil, nil) },
		allowed: func() map[string]apiOK {
			m := allowIn([]string{"REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "MRA_REQ_SENT", "REP_RCVD", "MRA_REP_SENT"}, apiOK{"IDLE", wire.AttrREJ})
			m["REP_SENT"] = apiOK{"TIMEWAIT", wire.AttrREJ}
			m["MRA_REP_RCVD"] = apiOK{"TIMEWAIT", wire.AttrREJ}
			return m
		}()},
	{name: "SendMRA", do: func(h *harness, id *ID) error { return id.SendMRA(20, nil) },
		allowed: map[string]apiOK{
			"REQ_RCVD":             {"MRA_REQ_SENT", wire.AttrMRA},
			"REP_RCVD":             {"MRA_REP_SENT", wire.AttrMRA},
			"ESTABLISHED/LAP_RCVD": {"ESTABLISHED/MRA_LAP_SENT", wire.AttrMRA},
		}},
	{name: "SendMRA/delay", do: func(h *harness, id *ID) error { return id.SendMRA(MRAFlagDelay|20, nil) },
		allowed: map[string]apiOK{
			"REQ_RCVD":             {"MRA_REQ_SENT", 0},
			"REP_RCVD":             {"MRA_REP_SENT", 0},
			"ESTABLISHED/LAP_RCVD": {"ESTABLISHED/MRA_LAP_SENT", 0},
		}},
	{name: "SendLAP", do: func(h *harness, id *ID) error { return id.SendLAP(altPath(), nil) },
		allowed: allowIn([]string{"ESTABLISHED", "ESTABLISHED/passive", "ESTABLISHED/LAP_IDLE"}, apiOK{"ESTABLISHED/LAP_SENT", wire.AttrLAP})},
	{name: "SendAPR", do: func(h *harness, id *ID) error { return id.SendAPR(0, nil, nil) },
		allowed: allowIn([]string{"ESTABLISHED/LAP_RCVD", "ESTABLISHED/MRA_LAP_SENT"}, apiOK{"ESTABLISHED/LAP_IDLE", wire.AttrAPR})},
	{name: "SendSIDRREQ", do: func(h *harness, id *ID) error {
		return id.SendSIDRREQ(&SIDRREQParams{Path: testPath(), ServiceID: 1, TimeoutMs: 10})
	}, allowed: allowIn([]string{"IDLE"}, apiOK{"SIDR_REQ_SENT", wire.AttrSIDRREQ})},
	{name: "SendSIDRREP", do: func(h *harness, id *ID) error { return id.SendSIDRREP(&SIDRREPParams{QPN: 9}) },
		allowed: allowIn([]string{"SIDR_REQ_RCVD"}, apiOK{"IDLE", wire.AttrSIDRREP})},
	{name: "Notify/COMM_EST", do: func(h *harness, id *ID) error { return id.Notify(NotifyCommEst) },
		allowed: allowIn([]string{"REP_SENT", "MRA_REP_RCVD"}, apiOK{"ESTABLISHED", 0}),
		errno: func() map[string]unix.Errno {
			m := make(map[string]unix.Errno)
			for _, s := range established {
				m[s] = unix.EISCONN
			}
			return m
		}(),
		event: EventUserEstablished, hasEv: true},
	{name: "Notify/PATH_MIG", do: func(h *harness, id *ID) error { return id.Notify(NotifyPathMig) },
		allowed: allowIn([]string{"ESTABLISHED", "ESTABLISHED/passive", "ESTABLISHED/LAP_IDLE"}, apiOK{"ESTABLISHED/LAP_IDLE", 0})},
	{name: "Notify/other", do: func(h *harness, id *ID) error { return id.Notify(5) }},
}

// TestAPIStateTable runs every §3.2 call in every state.
func TestAPIStateTable(t *testing.T) {
	for _, c := range apiCalls {
		for _, st := range reachable {
			t.Run(c.name+"/"+st, func(t *testing.T) {
				h := newHarness(t)
				id := h.reach(st)
				before, beforeLAP := id.State()
				err := c.do(h, id)
				sent := h.sent()
				evs := h.takeEvents()
				ok, allowed := c.allowed[st]
				if !allowed {
					want := unix.EINVAL
					if e, has := c.errno[st]; has {
						want = e
					}
					if !errors.Is(err, want) {
						t.Fatalf("err = %v, want %v", err, want)
					}
					if s, l := id.State(); s != before || l != beforeLAP {
						t.Errorf("failed call moved %v/%v to %v/%v", before, beforeLAP, s, l)
					}
					if len(sent) != 0 || len(evs) != 0 {
						t.Errorf("failed call sent %v, queued %v", sent, evs)
					}
					return
				}
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				ws, wl := wantState(ok.after)
				s, l := id.State()
				if s != ws || (strings.Contains(ok.after, "/") && l != wl) {
					t.Errorf("state %v/%v, want %s", s, l, ok.after)
				}
				switch {
				case ok.sent == 0 && len(sent) != 0:
					t.Errorf("sent %T, want nothing", sent[0])
				case ok.sent != 0 && (len(sent) != 1 || sent[0].AttrID() != ok.sent):
					t.Errorf("sent %v, want one message %#x", sent, ok.sent)
				}
				if c.hasEv && (len(evs) != 1 || evs[0].Type != c.event) {
					t.Errorf("events %v, want %v", evs, c.event)
				}
			})
		}
	}
}

// TestPrivateDataLimits: over-long private data, ARI or info is EINVAL
// before any state check (§3.2 "pdata"), and changes nothing.
func TestPrivateDataLimits(t *testing.T) {
	big := func(n int) []byte { return make([]byte, n) }
	cases := []struct {
		state string
		name  string
		do    func(id *ID, n int) error
		limit int
	}{
		{"IDLE", "REQ", func(id *ID, n int) error { p := testREQParams(); p.PrivateData = big(n); return id.SendREQ(p) }, 92},
		{"REQ_RCVD", "REP", func(id *ID, n int) error { return id.SendREP(&REPParams{PrivateData: big(n)}) }, 196},
		{"REP_RCVD", "RTU", func(id *ID, n int) error { return id.SendRTU(big(n)) }, 224},
		{"ESTABLISHED", "DREQ", func(id *ID, n int) error { return id.SendDREQ(big(n)) }, 220},
		{"DREQ_RCVD", "DREP", func(id *ID, n int) error { return id.SendDREP(big(n)) }, 224},
		{"REQ_RCVD", "REJ", func(id *ID, n int) error { return id.SendREJ(28, nil, big(n)) }, 148},
		{"REQ_RCVD", "REJ ARI", func(id *ID, n int) error { return id.SendREJ(28, big(n), nil) }, 72},
		{"REQ_RCVD", "MRA", func(id *ID, n int) error { return id.SendMRA(20, big(n)) }, 222},
		{"ESTABLISHED", "LAP", func(id *ID, n int) error { return id.SendLAP(altPath(), big(n)) }, 168},
		{"ESTABLISHED/LAP_RCVD", "APR", func(id *ID, n int) error { return id.SendAPR(0, nil, big(n)) }, 148},
		{"ESTABLISHED/LAP_RCVD", "APR info", func(id *ID, n int) error { return id.SendAPR(0, big(n), nil) }, 72},
		{"IDLE", "SIDR_REQ", func(id *ID, n int) error {
			return id.SendSIDRREQ(&SIDRREQParams{Path: testPath(), PrivateData: big(n)})
		}, 216},
		{"SIDR_REQ_RCVD", "SIDR_REP", func(id *ID, n int) error { return id.SendSIDRREP(&SIDRREPParams{PrivateData: big(n)}) }, 136},
		{"SIDR_REQ_RCVD", "SIDR_REP info", func(id *ID, n int) error { return id.SendSIDRREP(&SIDRREPParams{Info: big(n)}) }, 72},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			id := h.reach(c.state)
			s0, l0 := id.State()
			if err := c.do(id, c.limit+1); !errors.Is(err, unix.EINVAL) {
				t.Fatalf("%d bytes: err = %v, want EINVAL", c.limit+1, err)
			}
			if s, l := id.State(); s != s0 || l != l0 || len(h.sent()) != 0 {
				t.Fatalf("rejected call changed state or sent")
			}
			if err := c.do(id, c.limit); err != nil {
				t.Fatalf("%d bytes: %v", c.limit, err)
			}
			if sent := h.sent(); len(sent) == 1 {
				if pd := privateData(sent[0]); strings.HasSuffix(c.name, "info") || strings.HasSuffix(c.name, "ARI") {
					_ = pd
				} else if len(pd) < c.limit {
					t.Errorf("sent private data area %d bytes, want ≥ %d", len(pd), c.limit)
				}
			}
		})
	}
}

func privateData(m wire.Message) []byte {
	switch m := m.(type) {
	case *wire.REQ:
		return m.PrivateData
	case *wire.REP:
		return m.PrivateData
	case *wire.RTU:
		return m.PrivateData
	case *wire.DREQ:
		return m.PrivateData
	case *wire.DREP:
		return m.PrivateData
	case *wire.REJ:
		return m.PrivateData
	case *wire.MRA:
		return m.PrivateData
	case *wire.LAP:
		return m.PrivateData
	case *wire.APR:
		return m.PrivateData
	case *wire.SIDRREQ:
		return m.PrivateData
	case *wire.SIDRREP:
		return m.PrivateData
	}
	return nil
}
