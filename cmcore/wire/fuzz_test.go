package wire

import (
	"reflect"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

// FuzzDecode: Decode never panics on any 256 bytes, and whatever it accepts
// re-encodes, decodes to the same message, and re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, tc := range goldenCases {
		var m hw.MAD
		if err := Encode(&m, tc.tid, tc.msg); err != nil {
			f.Fatal(err)
		}
		f.Add(m[:])
	}
	for _, tc := range maxCases {
		var m hw.MAD
		if err := Encode(&m, 0, tc.msg); err != nil {
			f.Fatal(err)
		}
		f.Add(m[:])
	}
	var rej hw.MAD // an ARI length past its area
	if err := Encode(&rej, 1, &REJ{Reason: 28, ARI: []byte{1}}); err != nil {
		f.Fatal(err)
	}
	rej[HeaderSize+9] = 127 << 1
	f.Add(rej[:])
	for _, name := range []string{"kernel-6.1-req.hex", "kernel-6.1-rep.hex", "kernel-6.1-rej-invalid-sid.hex", "reqtest-req.hex"} {
		f.Add(readCapture(f, name)[:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var mad hw.MAD
		copy(mad[:], data)
		h, m, err := Decode(&mad)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a message with error %v", err)
			}
			return
		}
		var enc hw.MAD
		if err := Encode(&enc, h.TID, m); err != nil {
			t.Fatalf("decoded %T does not re-encode: %v", m, err)
		}
		h2, m2, err := Decode(&enc)
		if err != nil {
			t.Fatalf("re-encoded %T does not decode: %v", m, err)
		}
		if h2.TID != h.TID || h2.AttrID != h.AttrID {
			t.Fatalf("header changed: %+v -> %+v", h, h2)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("decode-encode-decode changed the message:\n%+v\n%+v", m, m2)
		}
		var enc2 hw.MAD
		if err := Encode(&enc2, h2.TID, m2); err != nil || enc2 != enc {
			t.Fatalf("second encoding differs (err %v)", err)
		}
		// What Encode wrote is what Decode read, less the reserved bits and
		// a length cut to its area (variable).
		cutLength(&mad, h.AttrID)
		for i := HeaderSize; i < hw.MADSize; i++ {
			if enc[i]&^mad[i] != 0 {
				t.Fatalf("encoding set bits the input did not have at data byte %d: %#02x vs %#02x", i-HeaderSize, enc[i], mad[i])
			}
		}
	})
}

// cutLength writes into mad the ARI or info length Decode cut to its area.
func cutLength(mad *hw.MAD, attr uint16) {
	var f *bitField
	switch attr {
	case AttrREJ:
		f = &rejARILength
	case AttrAPR:
		f = &aprInfoLength
	case AttrSIDRREP:
		f = &sidrREPInfoLength
	default:
		return
	}
	d := mad[HeaderSize:]
	if f.get(d) > 72 {
		f.put(d, 72)
	}
}
