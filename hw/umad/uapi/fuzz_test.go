package uapi

import (
	"bytes"
	"testing"
)

// FuzzUserMADHdr: decoding then encoding any header gives back the same
// bytes, except the reserved tail, which encoding clears.
func FuzzUserMADHdr(f *testing.F) {
	f.Add(make([]byte, SizeofUserMADHdr))
	f.Add(bytes.Repeat([]byte{0xff}, SizeofUserMADHdr))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h UserMADHdr
		if err := h.Decode(b); err != nil {
			if len(b) >= SizeofUserMADHdr {
				t.Fatalf("%d bytes refused: %v", len(b), err)
			}
			return
		}
		out := make([]byte, SizeofUserMADHdr)
		if err := h.Encode(out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[:58], b[:58]) || !bytes.Equal(out[58:], make([]byte, 6)) {
			t.Fatalf("round trip\n%x\nof\n%x", out, b[:SizeofUserMADHdr])
		}
	})
}
