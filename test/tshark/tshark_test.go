//go:build tshark

// Package tshark checks ucmd trace's captures with an independent decoder,
// tshark, on the host (the guest has no Wireshark). test/vm/e2e.sh runs it
// after the VM when the e2e run left a capture (TestTraceCapture), so it
// runs in `make e2e` and `make check`; alone: `make trace-check`.
package tshark

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/trace"
)

func tshark(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatal("tshark not installed (make vm-setup installs it)")
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// zeroUDPChecksum is the one expert message allowed: RoCEv2 (rxe, and the
// capture that mirrors it) sends a zero UDP checksum, which IPv6 forbids.
const zeroUDPChecksum = "Illegal checksum value (0)"

// checkClean fails on any malformed frame and any warning or error but a
// zero UDP checksum over IPv6; it returns the frame count.
func checkClean(t *testing.T, capture string) int {
	t.Helper()
	if out := tshark(t, "-r", capture, "-Y", "_ws.malformed", "-T", "fields", "-e", "frame.number"); strings.TrimSpace(out) != "" {
		t.Errorf("malformed frames: %s", strings.Fields(out))
	}
	out := tshark(t, "-r", capture, "-Y", `_ws.expert.severity >= "warning"`, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|",
		"-e", "frame.number", "-e", "ipv6.src", "-e", "_ws.expert.message")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		f := strings.Split(l, "\t")
		for _, msg := range strings.Split(f[2], "|") {
			if msg != zeroUDPChecksum || f[1] == "" {
				t.Errorf("frame %s: %s", f[0], msg)
			}
		}
	}
	return len(strings.Fields(tshark(t, "-r", capture, "-T", "fields", "-e", "frame.number")))
}

// same compares a tshark value with an expected one: as numbers when both
// are, as addresses when both are, else as hex bytes.
func same(got, want string) bool {
	g, gerr := strconv.ParseUint(got, 0, 64)
	w, werr := strconv.ParseUint(want, 0, 64)
	if gerr == nil && werr == nil {
		return g == w
	}
	ga, gerr := netip.ParseAddr(got)
	wa, werr := netip.ParseAddr(want)
	if gerr == nil && werr == nil {
		return ga == wa
	}
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, ":", "")) }
	return norm(got) == norm(want)
}

// frames reads the capture's packets (the raw bytes tshark decoded).
func frames(t *testing.T, capture string) [][]byte {
	t.Helper()
	f, err := os.Open(capture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewNgReader(f, pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			return out
		}
		out = append(out, append([]byte(nil), data...))
	}
}

// madOf is the MAD of a RoCEv2 frame: after Ethernet, IPv6 or IPv4, UDP,
// BTH and DETH.
func madOf(frame []byte) []byte {
	ip := 40
	if binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
		ip = 20
	}
	off := 14 + ip + 8 + 12 + 8
	if len(frame) < off+hw.MADSize {
		return nil
	}
	return frame[off : off+hw.MADSize]
}

// pseudo fields of expected.json: not tshark's.
func pseudo(name string, frame []byte, fields map[string]string) (string, bool) {
	switch {
	case strings.HasSuffix(name, ".low"):
		v, err := strconv.ParseUint(fields[strings.TrimSuffix(name, ".low")], 0, 64)
		if err != nil {
			return "", true
		}
		return "0x" + strconv.FormatUint(v&0xffffffff, 16), true
	case strings.HasSuffix(name, ".prefix"):
		return fields[strings.TrimSuffix(name, ".prefix")], true
	case name == "bytes.req.prim_flowlabel":
		mad := madOf(frame)
		if mad == nil {
			return "", true
		}
		return "0x" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(mad[wire.HeaderSize+88:])>>12), 16), true
	case name == "bytes.req.prim_pktrate":
		mad := madOf(frame)
		if mad == nil {
			return "", true
		}
		return strconv.Itoa(int(mad[wire.HeaderSize+91] & 0x3f)), true
	}
	return "", false
}

// TestE2ECapture checks the capture TestTraceCapture (test/e2e) left in
// $TRACE_DIR (bin/e2e/run/scratch/trace by default): tshark calls no frame
// malformed and warns of nothing but rxe's zero IPv6 UDP checksum, there is
// one frame per MAD sent or received, and every frame decodes, field by
// field, to what the test sent (REQ flow label and packet rate, which
// tshark 4.0 misreads, from the MAD's bytes instead).
func TestE2ECapture(t *testing.T) {
	dir := os.Getenv("TRACE_DIR")
	if dir == "" {
		dir = "../../bin/e2e/run/scratch/trace"
	}
	capture := filepath.Join(dir, "cm.pcapng")
	raw, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatalf("no capture to check (run E2E_FLAGS=-test.run=TraceCapture make e2e first): %v", err)
	}
	var exp struct {
		Messages []map[string]string `json:"messages"`
		Frames   int                 `json:"frames"`
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	t.Logf("tshark: %s", strings.TrimSpace(strings.SplitN(tshark(t, "-v"), "\n", 2)[0]))
	n := checkClean(t, capture)
	if n != exp.Frames {
		t.Errorf("%d frames, the trace had %d MADs on the wire", n, exp.Frames)
	}
	t.Logf("tshark -r cm.pcapng:\n%s", tshark(t, "-r", capture))

	// Every tshark field any message expects, for every frame.
	var names []string
	for _, m := range exp.Messages {
		for k := range m {
			if !strings.HasPrefix(k, "bytes.") {
				k = strings.TrimSuffix(strings.TrimSuffix(k, ".low"), ".prefix")
				if !slices.Contains(names, k) {
					names = append(names, k)
				}
			}
		}
	}
	slices.Sort(names)
	args := []string{"-r", capture, "-T", "fields", "-E", "occurrence=f"}
	for _, k := range names {
		args = append(args, "-e", k)
	}
	raws := frames(t, capture)
	lines := strings.Split(strings.TrimRight(tshark(t, args...), "\n"), "\n")
	if len(lines) != len(raws) {
		t.Fatalf("tshark printed %d frames, the capture has %d", len(lines), len(raws))
	}
	matched := make([]int, len(exp.Messages))
	for i, l := range lines {
		vals := strings.Split(l, "\t")
		fields := map[string]string{}
		for j, k := range names {
			if j < len(vals) {
				fields[k] = vals[j]
			}
		}
		// The expected message: same attribute, and for REQs the same
		// local comm id.
		var cand []int
		for j, m := range exp.Messages {
			if same(fields["infiniband.mad.attributeid"], m["infiniband.mad.attributeid"]) &&
				(m["infiniband.cm.req"] == "" || same(fields["infiniband.cm.req"], m["infiniband.cm.req"])) {
				cand = append(cand, j)
			}
		}
		if len(cand) != 1 {
			t.Errorf("frame %d (attribute %s): %d expected messages match", i+1, fields["infiniband.mad.attributeid"], len(cand))
			continue
		}
		m := exp.Messages[cand[0]]
		matched[cand[0]]++
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		bad := 0
		for _, k := range keys {
			want := m[k]
			got, ok := pseudo(k, raws[i], fields)
			if !ok {
				got = fields[k]
			}
			if strings.HasSuffix(k, ".prefix") {
				if !strings.HasPrefix(strings.ToLower(strings.ReplaceAll(got, ":", "")), want) {
					t.Errorf("frame %d %s: %s is %q, want it to start with %q", i+1, wire.AttrName(attr(m)), k, got, want)
					bad++
				}
				continue
			}
			if !same(got, want) {
				t.Errorf("frame %d %s: %s is %q, want %q", i+1, wire.AttrName(attr(m)), k, got, want)
				bad++
			}
		}
		if bad == 0 {
			t.Logf("frame %d %s: %d fields as sent", i+1, wire.AttrName(attr(m)), len(keys))
		}
	}
	for j, c := range matched {
		if c < 2 {
			t.Errorf("%s %s: %d frames, want its send and its receipt", wire.AttrName(attr(exp.Messages[j])), exp.Messages[j]["infiniband.cm.req"], c)
		}
	}
}

func attr(m map[string]string) uint16 {
	v, _ := strconv.ParseUint(m["infiniband.mad.attributeid"], 0, 16)
	return uint16(v)
}

// TestGoldenCapture: tshark reads the frame builders' output for each
// encapsulation (RoCEv2 over IPv6 and IPv4, IB with and without a GRH in
// ERF records) as InfiniBand CM, with no malformed frame.
func TestGoldenCapture(t *testing.T) {
	var mad hw.MAD
	req := &wire.REQ{
		LocalCommID: 0x0a000001, ServiceID: 0x1234, LocalCAGUID: 0x0002c90300000001, LocalQPN: 0x111,
		StartingPSN: 0x1000, PartitionKey: 0xffff, PathMTU: 3, MaxCMRetries: 3,
		Primary: wire.Path{LocalLID: 1, RemoteLID: 2, SubnetLocal: true, PacketRate: 3, LocalACKTimeout: 18},
	}
	if err := wire.Encode(&mad, 0x0a000001, req); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	evs := []trace.Event{
		{Time: at, Dev: "rxe0", Port: 1, Link: trace.LinkRoCE, Dir: "sent", MAD: mad[:], PKey: 0xffff,
			Local: trace.Endpoint{GID: "fe80::ff:fe00:1", QPN: 1}, Remote: trace.Endpoint{GID: "fe80::ff:fe00:2", QPN: 1}, GRH: &trace.GRH{HopLimit: 64}},
		{Time: at, Dev: "rxe0", Port: 1, Link: trace.LinkRoCE, Dir: "received", MAD: mad[:], PKey: 0xffff,
			Local: trace.Endpoint{GID: "10.0.0.1", QPN: 1}, Remote: trace.Endpoint{GID: "10.0.0.2", QPN: 1}, GRH: &trace.GRH{HopLimit: 64}},
		{Time: at, Dev: "mlx5_0", Port: 1, Link: trace.LinkIB, Dir: "sent", MAD: mad[:], PKey: 0xffff,
			Local: trace.Endpoint{LID: 1, QPN: 1}, Remote: trace.Endpoint{LID: 2, QPN: 1}},
		{Time: at, Dev: "mlx5_0", Port: 1, Link: trace.LinkIB, Dir: "sent", MAD: mad[:], PKey: 0xffff,
			Local: trace.Endpoint{LID: 1, GID: "fe80::2:c903:0:1", QPN: 1}, Remote: trace.Endpoint{LID: 2, GID: "fe80::2:c903:0:2", QPN: 1}, GRH: &trace.GRH{HopLimit: 255}},
	}
	path := filepath.Join(t.TempDir(), "golden.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	c := trace.NewCapture(f)
	for i := range evs {
		if err := c.Write(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := checkClean(t, path); n != len(evs) {
		t.Fatalf("%d frames", n)
	}
	out := tshark(t, "-r", path, "-T", "fields", "-e", "frame.protocols", "-e", "infiniband.cm.req", "-e", "infiniband.cm.req.localqpn", "-e", "infiniband.cm.req.serviceid")
	want := []string{"eth:ethertype:ipv6:udp:infiniband", "eth:ethertype:ip:udp:infiniband", "erf:infiniband", "erf:infiniband"}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 || f[0] != want[i] || !same(f[1], "0x0a000001") || !same(f[2], "0x111") || !same(f[3], "0x1234") {
			t.Errorf("frame %d: %q, want %s with the REQ's fields", i+1, l, want[i])
		}
	}
}
