//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

// umad's write() refuses (EINVAL) a request MAD whose class and TID equal
// those of a MAD still on the same umad file's send list, and cmcore gives
// several messages of one connection one TID. These tests send the
// protocol's back-to-back pairs with one TID, as fast as the endpoint
// takes them and the receiver keeps up (tidInFlight), and require that
// umad refuses none and that every MAD arrives exactly once (docs/umad.md,
// "Same-TID sends").

// CM attribute IDs of the pairs.
const (
	attrMRA  = 0x0011
	attrREJ  = 0x0012
	attrRTU  = 0x0014
	attrDREQ = 0x0015
	attrDREP = 0x0016
)

type tidPair struct {
	name         string
	first, again uint16 // attribute IDs, sent back to back with one TID
	// answer: the second MAD comes from the other end (DREP answering
	// DREQ), not from the first MAD's sender.
	answer bool
}

var tidPairs = []tidPair{
	{"RTU+DREQ", attrRTU, attrDREQ, false},
	{"MRA+REJ", attrMRA, attrREJ, false},
	{"DREQ+DREP", attrDREQ, attrDREP, true},
}

const tidPairRounds = 1000

// tidInFlight bounds the MADs sent and not yet received. The kernel's MAD
// layer keeps 512 receive buffers per port (ib_core's recv_queue_size) and
// posts them again from its completion work, and a UD QP drops what
// arrives while it has none posted. In CI, on a loaded host, a burst of
// 2,000 MADs lost all but 512: the receiving side's completion work did not
// run while the sender went on. Loss there is UD's, for the CM to repair
// by retransmission, not what these tests look for; so a receiver that
// falls behind holds the sender back. Each pair still goes out back to
// back.
const tidInFlight = 128

func TestUMADSameTIDBackToBackOnePort(t *testing.T) {
	p0, _ := rxePorts(t)
	g0 := linkLocal(t, p0)
	e0 := openCM(t, p0)
	self := hw.Address{QPN: 1, QKey: 0x80010000, GRH: &hw.GRH{GID: g0.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	for i, pair := range tidPairs {
		t.Run(pair.name, func(t *testing.T) {
			sendTIDPairs(t, pair, uint32(i+1)<<24, e0, e0, self, self, p0)
		})
	}
}

func TestUMADSameTIDBackToBackTwoPorts(t *testing.T) {
	p0, p1 := rxePorts(t)
	g0, g1 := linkLocal(t, p0), linkLocal(t, p1)
	e0, e1 := openCM(t, p0), openCM(t, p1)
	to1 := hw.Address{QPN: 1, QKey: 0x80010000, GRH: &hw.GRH{GID: g1.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	to0 := hw.Address{QPN: 1, QKey: 0x80010000, GRH: &hw.GRH{GID: g0.GID, SGIDIndex: uint8(g1.Index), HopLimit: 64}}
	for i, pair := range tidPairs {
		t.Run(pair.name, func(t *testing.T) {
			sendTIDPairs(t, pair, uint32(i+1)<<24, e0, e1, to1, to0, p0, p1)
		})
	}
}

// sendTIDPairs sends tidPairRounds pairs: a's first MAD to b, then at
// once the second, from a (to b) or, for an answer, from b (to a). Round
// r uses TID base+r in both MADs. ports are a's and b's (one, if the
// same), whose packet counters the log shows: a MAD the HCA received but
// no endpoint read was dropped for want of a receive buffer (or is still
// in the kernel); one the HCA never received was lost on the way.
func sendTIDPairs(t *testing.T, pair tidPair, base uint32, a, b hw.Endpoint, toB, toA hw.Address, ports ...hw.Port) {
	before := map[hw.Endpoint]umad.Stats{a: a.(*umad.Endpoint).Stats(), b: b.(*umad.Endpoint).Stats()}
	pktsBefore := make([][2]uint64, len(ports))
	for i, p := range ports {
		pktsBefore[i] = packets(t, p)
	}
	type key struct {
		tid  uint32
		attr uint16
	}
	want := tidPairRounds * 2
	got := make(chan key, want)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recvDone := make(chan error, 2)
	receivers := []hw.Endpoint{b}
	if pair.answer && a != b {
		receivers = append(receivers, a)
	}
	for _, ep := range receivers {
		go func() {
			for {
				r, err := ep.Recv(ctx)
				if err != nil {
					recvDone <- err
					return
				}
				got <- key{binary.BigEndian.Uint32(r.MAD[12:16]), binary.BigEndian.Uint16(r.MAD[16:18])}
			}
		}()
	}

	seen := map[key]int{}
	sent, received := 0, 0 // MADs umad took; MADs that arrived
	take := func(k key) {
		seen[k]++
		received++
	}
	// catchUp waits until at most tidInFlight-2 MADs are on their way, so
	// that the next pair fits. A MAD really lost would hold it forever:
	// after one stall of 10 s it waits no more, and the loss is reported.
	stalled := false
	catchUp := func() {
		if stalled {
			return
		}
		stall := time.NewTimer(10 * time.Second)
		defer stall.Stop()
		for sent-received > tidInFlight-2 {
			select {
			case k := <-got:
				take(k)
			case <-stall.C:
				stalled = true
				return
			}
		}
	}
	refused := 0
	var firstErr error
	send := func(ep hw.Endpoint, dst hw.Address, attr uint16, tid uint32) {
		if err := ep.Send(ctx, dst, cmMAD(attr, uint64(tid), byte(tid))); err != nil {
			refused++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		sent++
	}
	start := time.Now()
	for r := range uint32(tidPairRounds) {
		catchUp()
		tid := base + r
		send(a, toB, pair.first, tid)
		if pair.answer {
			send(b, toA, pair.again, tid)
		} else {
			send(a, toB, pair.again, tid)
		}
	}
	took := time.Since(start)

	timeout := time.After(30 * time.Second)
collect:
	for len(seen) < want {
		select {
		case k := <-got:
			take(k)
		case <-timeout:
			break collect
		}
	}
	// Anything still arriving would be a duplicate.
	linger := time.After(200 * time.Millisecond)
drain:
	for {
		select {
		case k := <-got:
			take(k)
		case <-linger:
			break drain
		}
	}
	cancel()
	for range receivers {
		<-recvDone
	}

	missing, dups := 0, 0
	var example string
	for r := range uint32(tidPairRounds) {
		for _, attr := range []uint16{pair.first, pair.again} {
			switch n := seen[key{base + r, attr}]; {
			case n == 0:
				missing++
				if example == "" {
					example = fmt.Sprintf("TID %#x attr %#x", base+r, attr)
				}
			case n > 1:
				dups++
			}
		}
	}
	for ep, st := range before {
		now := ep.(*umad.Endpoint).Stats()
		t.Logf("endpoint %p: received %d, overflow %d, renewals %d", ep,
			now.Received-st.Received, now.Overflow-st.Overflow, now.Renewals-st.Renewals)
	}
	for i, p := range ports {
		now := packets(t, p)
		t.Logf("%s port %d: sent %d packets, received %d", p.Device().Name(), p.Num(),
			now[0]-pktsBefore[i][0], now[1]-pktsBefore[i][1])
	}
	window := fmt.Sprintf("at most %d MADs in flight", tidInFlight)
	if stalled {
		window += " until a stall of 10 s"
	}
	t.Logf("%d rounds sent in %v (%s): %d refused by umad, %d missing, %d duplicated",
		tidPairRounds, took, window, refused, missing, dups)
	if refused != 0 {
		t.Errorf("umad refused %d of %d sends; first: %v", refused, want, firstErr)
	}
	if missing != 0 || dups != 0 {
		t.Errorf("%d MADs missing (e.g. %s), %d received more than once", missing, example, dups)
	}
}

// packets reads p's HCA packet counters, sent and received, from sysfs
// (every rxe port has them).
func packets(t *testing.T, p hw.Port) [2]uint64 {
	t.Helper()
	var out [2]uint64
	for i, name := range []string{"sent_pkts", "rcvd_pkts"} {
		path := fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/hw_counters/%s", p.Device().Name(), p.Num(), name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return out
}
