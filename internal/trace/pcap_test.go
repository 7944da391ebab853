package trace

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// A capture reads back through pcapgo's own reader: one interface per
// port with its link type, every on-wire MAD as its frame with its time,
// nothing for refused sends, timeouts or loss markers; and gopacket's
// decoders find Ethernet / IPv6 / UDP 4791 in the RoCE frames.
func TestCaptureRoundTrip(t *testing.T) {
	roce, ib := roceEvent(), ibEvent(true)
	retx := roceEvent()
	retx.Dir, retx.Time = "retransmitted", t0.Add(384*time.Millisecond)
	failed := roceEvent()
	failed.Dir, failed.Reason = "send-failed", "no route"
	timedOut := roceEvent()
	timedOut.Dir = "timed-out"
	in := roce4Event()
	in.Time = t0.Add(time.Second)
	evs := []Event{roce, ib, retx, failed, timedOut, {Time: t0, Lost: 3}, in}

	var buf bytes.Buffer
	c := NewCapture(&buf)
	for i := range evs {
		if err := c.Write(&evs[i]); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Frames() != 4 {
		t.Errorf("%d frames written, want 4", c.Frames())
	}

	// Ethernet and InfiniBand interfaces in one file.
	r, err := pcapgo.NewNgReader(&buf, pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{roce, ib, retx, in}
	wantIntf := []int{0, 1, 0, 0}
	for i, ev := range want {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		f, _ := Frame(&ev)
		if ev.Link == LinkIB {
			f = erfRecord(ev.Time, f)
		}
		if !bytes.Equal(data, f) {
			t.Errorf("packet %d differs from its frame", i)
		}
		if !ci.Timestamp.Equal(ev.Time) || ci.InterfaceIndex != wantIntf[i] || ci.Length != len(f) {
			t.Errorf("packet %d: %+v", i, ci)
		}
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Errorf("after the last packet: %v", err)
	}
	if n := r.NInterfaces(); n != 2 {
		t.Fatalf("%d interfaces, want 2", n)
	}
	for i, want := range []struct {
		name string
		lt   layers.LinkType
	}{{"rxe0:1", layers.LinkTypeEthernet}, {"mlx5_0:1", LinkTypeERF}} {
		intf, err := r.Interface(i)
		if err != nil || intf.Name != want.name || intf.LinkType != want.lt {
			t.Errorf("interface %d: %+v, %v; want %s %v", i, intf, err, want.name, want.lt)
		}
	}

	f, _ := Frame(&roce)
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip6 == nil || udp == nil {
		t.Fatalf("gopacket decodes %v", p)
	}
	if ip6.SrcIP.String() != roce.Local.GID || ip6.DstIP.String() != roce.Remote.GID || ip6.FlowLabel != 0x12345 || ip6.TrafficClass != 0x28 || ip6.HopLimit != 64 {
		t.Errorf("IPv6 %+v", ip6)
	}
	if udp.DstPort != 4791 || int(udp.Length) != len(f)-14-40 {
		t.Errorf("UDP %+v", udp)
	}
	if !bytes.Equal(udp.Payload[20:20+256], roce.MAD) {
		t.Error("the MAD is not after BTH and DETH")
	}
}

// An empty capture is still a valid pcapng file.
func TestCaptureEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := NewCapture(&buf).Close(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(&buf, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Errorf("empty capture: %v", err)
	}
}

// An IB frame in its ERF record: type 21 (InfiniBand), variable length,
// the record and wire lengths, the time as 32.32 fixed point; with
// IBLinkType LinkTypeInfiniBand the frame is written bare.
func TestERFRecord(t *testing.T) {
	ev := ibEvent(false)
	ev.Time = time.Unix(0x6b0f4cc0, 500_000_000)
	f, _ := Frame(&ev)
	r := erfRecord(ev.Time, f)
	want := unhex(t, "00000080 c04c0f6b 15 04 0132 0000 0122")
	if !bytes.Equal(r[:16], want) || !bytes.Equal(r[16:], f) {
		t.Fatalf("ERF header %x, want %x", r[:16], want)
	}

	var buf bytes.Buffer
	c := NewCapture(&buf)
	c.IBLinkType = LinkTypeInfiniBand
	if err := c.Write(&ev); err != nil {
		t.Fatal(err)
	}
	c.Close()
	rd, err := pcapgo.NewNgReader(&buf, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := rd.ReadPacketData()
	if err != nil || !bytes.Equal(data, f) || rd.LinkType() != LinkTypeInfiniBand {
		t.Fatalf("bare IB frame: %v, link type %v", err, rd.LinkType())
	}
}
