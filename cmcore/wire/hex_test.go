package wire

import (
	"bufio"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

// parseHex reads hand-written MAD bytes. Each line is "OFF: hexbytes..."
// (spaces between groups are ignored) or "OFF..END: XX" to fill a range;
// "#" starts a comment. OFF is hex and base is added to it. Bytes not
// mentioned stay zero.
func parseHex(t testing.TB, mad *hw.MAD, base int, text string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		where, data, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("hex line %q: no offset", line)
		}
		data = strings.ReplaceAll(data, " ", "")
		if from, to, isRange := strings.Cut(where, ".."); isRange {
			a, b := hexInt(t, from)+base, hexInt(t, to)+base
			v := hexInt(t, data)
			for i := a; i <= b; i++ {
				mad[i] = byte(v)
			}
			continue
		}
		off := hexInt(t, where) + base
		if len(data)%2 != 0 {
			t.Fatalf("hex line %q: odd number of digits", line)
		}
		for i := 0; i < len(data); i += 2 {
			mad[off+i/2] = byte(hexInt(t, data[i:i+2]))
		}
	}
}

func hexInt(t testing.TB, s string) int {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(s), 16, 32)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return int(v)
}

// madOf builds a MAD from a header line (MAD offset 0) and data lines
// (data offsets, as in the IBTA tables).
func madOf(t testing.TB, hdr, data string) *hw.MAD {
	t.Helper()
	var m hw.MAD
	parseHex(t, &m, 0, "0: "+hdr)
	parseHex(t, &m, HeaderSize, data)
	return &m
}

// readCapture loads a testdata capture (MAD offsets).
func readCapture(t testing.TB, name string) *hw.MAD {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m hw.MAD
	parseHex(t, &m, 0, string(b))
	return &m
}

// diffMAD reports the differing bytes of two MADs.
func diffMAD(t testing.TB, got, want *hw.MAD) {
	t.Helper()
	n := 0
	for i := range got {
		if got[i] != want[i] {
			if n < 16 {
				t.Errorf("MAD byte %#04x (data %d): got %#02x, want %#02x", i, i-HeaderSize, got[i], want[i])
			}
			n++
		}
	}
	if n > 16 {
		t.Errorf("... %d differing bytes in all", n)
	}
}

var privateDataSize = map[uint16]int{
	AttrREQ: REQPrivateDataSize, AttrMRA: MRAPrivateDataSize, AttrREJ: REJPrivateDataSize,
	AttrREP: REPPrivateDataSize, AttrRTU: RTUPrivateDataSize, AttrDREQ: DREQPrivateDataSize,
	AttrDREP: DREPPrivateDataSize, AttrLAP: LAPPrivateDataSize, AttrAPR: APRPrivateDataSize,
	AttrSIDRREQ: SIDRREQPrivateDataSize, AttrSIDRREP: SIDRREPPrivateDataSize,
}

// padded returns a copy of m with PrivateData zero-padded to its full area:
// what Decode returns for what Encode sent.
func padded(m Message) Message {
	v := reflect.ValueOf(m).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	f := c.Elem().FieldByName("PrivateData")
	pd := make([]byte, privateDataSize[m.AttrID()])
	copy(pd, f.Bytes())
	f.SetBytes(pd)
	return c.Interface().(Message)
}
