package hw

import "testing"

// PKeyIndex picks as ib_find_cached_pkey does: the first full member equal
// in the low 15 bits, else the last limited member, whatever membership
// the P_Key asked for has.
func TestPKeyIndex(t *testing.T) {
	a := PortAttr{PKeys: []uint16{0x7fff, 0x0001, 0xffff, 0x8001, 0x0002, 0x0002, 0x0000}}
	for _, tc := range []struct {
		pkey uint16
		want int
		ok   bool
	}{
		{0xffff, 2, true}, // the full member, though a limited one comes first
		{0x7fff, 2, true}, // asked as limited: the full member all the same
		{0x8002, 5, true}, // no full member: the last limited one
		{0x0001, 3, true}, // a full member after a limited one
		{0x1234, -1, false},
	} {
		if got, ok := a.PKeyIndex(tc.pkey); got != tc.want || ok != tc.ok {
			t.Errorf("PKeyIndex(%#04x) = %d, %v; want %d, %v", tc.pkey, got, ok, tc.want, tc.ok)
		}
	}
}
