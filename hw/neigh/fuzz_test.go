package neigh

import (
	"net/netip"
	"testing"
)

// FuzzReplies: whatever a datagram holds, cutting it into messages and
// reading routes, entries and errors from them returns or fails, never
// panics, and never hands out bytes past a message.
func FuzzReplies(f *testing.F) {
	f.Add(routeRequest(1, 2, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")))
	f.Add(neighRequest(2, 2, netip.MustParseAddr("fe80::2")))
	f.Add(append(useRequest(3, 2, netip.MustParseAddr("10.0.0.2")), useRequest(4, 2, netip.MustParseAddr("fe80::2"))...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := splitReplies(b)
		if err != nil {
			return
		}
		total := 0
		for _, m := range msgs {
			if int(m.Len) != sizeofNlMsghdr+len(m.body) {
				t.Fatalf("message of length %d with a body of %d", m.Len, len(m.body))
			}
			total += int(m.Len)
			parseRoute(m)
			parseNeigh(m)
			m.errno()
			m.attrs(sizeofNdMsg, func(_ uint16, data []byte) {
				if len(data) > len(m.body) {
					t.Fatalf("attribute of %d bytes in a body of %d", len(data), len(m.body))
				}
			})
		}
		if total > len(b) {
			t.Fatalf("messages of %d bytes in %d", total, len(b))
		}
	})
}
