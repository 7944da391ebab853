//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/umad"
)

// umad's write() refuses (EINVAL) a request MAD whose class and TID equal
// those of a MAD still on the same umad file's send list, and cmcore gives
// several messages of one connection one TID. These tests send the
// protocol's back-to-back pairs with one TID, as fast as the endpoint
// takes them, and require that umad refuses none and that every MAD
// arrives exactly once (docs/umad.md, "Same-TID sends").

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

func TestUMADSameTIDBackToBackOnePort(t *testing.T) {
	p0, _ := rxePorts(t)
	g0 := linkLocal(t, p0)
	e0 := openCM(t, p0)
	self := hw.Address{QPN: 1, QKey: 0x80010000, GRH: &hw.GRH{GID: g0.GID, SGIDIndex: uint8(g0.Index), HopLimit: 64}}
	for i, pair := range tidPairs {
		t.Run(pair.name, func(t *testing.T) {
			sendTIDPairs(t, pair, uint32(i+1)<<24, e0, e0, self, self)
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
			sendTIDPairs(t, pair, uint32(i+1)<<24, e0, e1, to1, to0)
		})
	}
}

// sendTIDPairs sends tidPairRounds pairs: a's first MAD to b, then at
// once the second, from a (to b) or, for an answer, from b (to a). Round
// r uses TID base+r in both MADs.
func sendTIDPairs(t *testing.T, pair tidPair, base uint32, a, b hw.Endpoint, toB, toA hw.Address) {
	before := map[hw.Endpoint]umad.Stats{a: a.(*umad.Endpoint).Stats(), b: b.(*umad.Endpoint).Stats()}
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

	refused := 0
	var firstErr error
	send := func(ep hw.Endpoint, dst hw.Address, attr uint16, tid uint32) {
		if err := ep.Send(ctx, dst, cmMAD(attr, uint64(tid), byte(tid))); err != nil {
			refused++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	start := time.Now()
	for r := range uint32(tidPairRounds) {
		tid := base + r
		send(a, toB, pair.first, tid)
		if pair.answer {
			send(b, toA, pair.again, tid)
		} else {
			send(a, toB, pair.again, tid)
		}
	}
	sent := time.Since(start)

	seen := map[key]int{}
	timeout := time.After(30 * time.Second)
collect:
	for len(seen) < want {
		select {
		case k := <-got:
			seen[k]++
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
			seen[k]++
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
	t.Logf("%d rounds sent in %v: %d refused by umad, %d missing, %d duplicated", tidPairRounds, sent, refused, missing, dups)
	if refused != 0 {
		t.Errorf("umad refused %d of %d sends; first: %v", refused, want, firstErr)
	}
	if missing != 0 || dups != 0 {
		t.Errorf("%d MADs missing (e.g. %s), %d received more than once", missing, example, dups)
	}
}
