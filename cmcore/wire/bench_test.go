package wire

import (
	"testing"

	"github.com/ucmd/ucmd/hw"
)

func benchREQ() *REQ {
	for _, tc := range goldenCases {
		if r, ok := tc.msg.(*REQ); ok {
			return r
		}
	}
	panic("no REQ golden case")
}

func BenchmarkEncodeREQ(b *testing.B) {
	req := benchREQ()
	var mad hw.MAD
	b.ReportAllocs()
	for b.Loop() {
		if err := Encode(&mad, 1, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeREQ(b *testing.B) {
	var mad hw.MAD
	if err := Encode(&mad, 1, benchREQ()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(&mad); err != nil {
			b.Fatal(err)
		}
	}
}

// The small messages of a handshake, for the cmcore budget.
func BenchmarkEncodeRTU(b *testing.B) {
	var mad hw.MAD
	rtu := &RTU{LocalCommID: 1, RemoteCommID: 2}
	b.ReportAllocs()
	for b.Loop() {
		if err := Encode(&mad, 1, rtu); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRTU(b *testing.B) {
	var mad hw.MAD
	if err := Encode(&mad, 1, &RTU{LocalCommID: 1, RemoteCommID: 2}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(&mad); err != nil {
			b.Fatal(err)
		}
	}
}
